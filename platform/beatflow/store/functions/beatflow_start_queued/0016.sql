CREATE OR REPLACE FUNCTION beatflow_start_queued(
    p_dag_id text, p_max integer
) RETURNS SETOF dag_runs
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_running integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('beatflow.dispatch'), hashtext(p_dag_id));
    IF NOT EXISTS (SELECT 1 FROM dag_runs q WHERE q.dag_id = p_dag_id AND q.state = 'queued')
    THEN
        RETURN;
    END IF;
    SELECT c.running INTO v_running FROM dag_run_counts c WHERE c.dag_id = p_dag_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO dag_run_counts (dag_id, running) VALUES (p_dag_id, 0)
        ON CONFLICT (dag_id) DO NOTHING;
        SELECT c.running INTO v_running FROM dag_run_counts c
        WHERE c.dag_id = p_dag_id FOR UPDATE;
    END IF;
    RETURN QUERY
    WITH oldest AS MATERIALIZED (
        SELECT q.id FROM dag_runs q
        WHERE q.dag_id = p_dag_id AND q.state = 'queued'
        ORDER BY q.logical_date, q.id
        LIMIT greatest(0, p_max - v_running)
        FOR UPDATE
    ), started AS (
        UPDATE dag_runs
        SET state = 'running', started_at = coalesce(dag_runs.started_at, clock_timestamp())
        FROM oldest
        WHERE dag_runs.id = oldest.id
        RETURNING dag_runs.*
    )
    SELECT * FROM started;
END
$fn$
