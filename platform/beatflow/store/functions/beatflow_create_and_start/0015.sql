CREATE OR REPLACE FUNCTION beatflow_create_and_start(
    p_dag_id text, p_run_id text, p_logical_date timestamptz, p_trigger text, p_conf json,
    p_queued_at timestamptz, p_leader_epoch bigint, p_max integer
) RETURNS TABLE (is_new boolean, is_started boolean, run dag_runs)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_run dag_runs;
    v_started dag_runs;
    v_new boolean := true;
    v_own boolean := false;
    v_fast boolean;
    v_running integer;
BEGIN
    v_fast := p_max > coalesce(
            (SELECT c.running FROM dag_run_counts c WHERE c.dag_id = p_dag_id), 0)
        AND NOT EXISTS (
            SELECT 1 FROM dag_runs q WHERE q.dag_id = p_dag_id AND q.state = 'queued');
    INSERT INTO dag_runs AS d (dag_id, run_id, logical_date, trigger, conf, state, queued_at,
                               started_at, leader_epoch)
    VALUES (p_dag_id, p_run_id, p_logical_date, p_trigger, p_conf,
            CASE WHEN v_fast THEN 'running' ELSE 'queued' END, p_queued_at,
            CASE WHEN v_fast THEN clock_timestamp() END, p_leader_epoch)
    ON CONFLICT (dag_id, run_id) DO NOTHING
    RETURNING d.* INTO v_run;
    IF v_run.id IS NULL THEN
        v_new := false;
        SELECT d.* INTO v_run FROM dag_runs d WHERE d.dag_id = p_dag_id AND d.run_id = p_run_id;
    ELSIF v_fast THEN
        -- counted by the trigger under the count row's lock (held to commit): exact
        SELECT c.running INTO v_running FROM dag_run_counts c WHERE c.dag_id = p_dag_id;
        is_new := true;
        IF v_running <= p_max THEN
            is_started := true;
        ELSE
            -- the slot went to a racer: queued, started by a running run's end (this
            -- transaction holds the count row, so it must not wait for the dispatch lock)
            UPDATE dag_runs d SET state = 'queued', started_at = NULL
            WHERE d.id = v_run.id RETURNING d.* INTO v_run;
            is_started := false;
        END IF;
        run := v_run;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_run.state = 'queued' THEN
        FOR v_started IN SELECT * FROM beatflow_start_queued(p_dag_id, p_max) LOOP
            IF v_started.id = v_run.id THEN
                v_own := true;
                is_new := v_new;
            ELSE
                is_new := false;
            END IF;
            is_started := true;
            run := v_started;
            RETURN NEXT;
        END LOOP;
    END IF;
    IF NOT v_own THEN
        is_new := v_new;
        is_started := false;
        run := v_run;
        RETURN NEXT;
    END IF;
END
$fn$
