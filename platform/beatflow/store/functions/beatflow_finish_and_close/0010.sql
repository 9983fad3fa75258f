CREATE OR REPLACE FUNCTION beatflow_finish_and_close(
    p_key text, p_token text, p_result json, p_ended_at timestamptz,
    p_dag_id text, p_run_id text, p_run_state text, p_max integer
) RETURNS TABLE (kind text, run dag_runs)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_run dag_runs;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('beatflow.dispatch'), hashtext(p_dag_id));
    UPDATE task_runs t
    SET state = 'success', result = p_result, error = NULL, traceback = NULL,
        ended_at = p_ended_at, map_count = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE t.dedupe_key = p_key AND t.lease_token = p_token AND t.state = 'running';
    IF NOT FOUND THEN
        kind := 'lost';
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE dag_runs d
    SET state = p_run_state, ended_at = p_ended_at,
        started_at = coalesce(d.started_at, p_ended_at)
    WHERE d.dag_id = p_dag_id AND d.run_id = p_run_id AND d.state IN ('queued', 'running')
    RETURNING d.* INTO v_run;
    IF v_run.id IS NULL THEN
        kind := 'written';
        RETURN NEXT;
        RETURN;
    END IF;
    kind := 'closed';
    run := v_run;
    RETURN NEXT;
    kind := 'started';
    FOR run IN SELECT * FROM beatflow_start_queued(p_dag_id, p_max) LOOP
        RETURN NEXT;
    END LOOP;
END
$fn$
