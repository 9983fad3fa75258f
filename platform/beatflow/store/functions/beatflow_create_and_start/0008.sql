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
BEGIN
    INSERT INTO dag_runs AS d (dag_id, run_id, logical_date, trigger, conf, state, queued_at,
                               leader_epoch)
    VALUES (p_dag_id, p_run_id, p_logical_date, p_trigger, p_conf, 'queued', p_queued_at,
            p_leader_epoch)
    ON CONFLICT (dag_id, run_id) DO NOTHING
    RETURNING d.* INTO v_run;
    IF v_run.id IS NULL THEN
        v_new := false;
        SELECT d.* INTO v_run FROM dag_runs d WHERE d.dag_id = p_dag_id AND d.run_id = p_run_id;
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
