CREATE OR REPLACE FUNCTION beatflow_start_queued(
    p_dag_id text, p_max integer
) RETURNS SETOF dag_runs
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('beatflow.dispatch'), hashtext(p_dag_id));
    RETURN QUERY
    WITH started AS (
        UPDATE dag_runs
        SET state = 'running', started_at = coalesce(dag_runs.started_at, clock_timestamp())
        WHERE dag_runs.id IN (
            SELECT q.id FROM dag_runs q
            WHERE q.dag_id = p_dag_id AND q.state = 'queued'
            ORDER BY q.logical_date, q.id
            LIMIT greatest(0, p_max - coalesce((SELECT c.running FROM dag_run_counts c WHERE c.dag_id = p_dag_id), 0))
        ) AND dag_runs.state = 'queued'
        RETURNING dag_runs.*
    )
    SELECT * FROM started;
END
$fn$
