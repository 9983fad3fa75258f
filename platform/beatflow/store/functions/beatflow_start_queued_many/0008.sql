CREATE OR REPLACE FUNCTION beatflow_start_queued_many(
    p_dag_ids text[], p_maxes integer[]
) RETURNS SETOF dag_runs
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_dag record;
BEGIN
    FOR v_dag IN
        SELECT t.dag_id, t.max_runs
        FROM unnest(p_dag_ids, p_maxes) AS t(dag_id, max_runs)
        ORDER BY hashtext(t.dag_id), t.dag_id
    LOOP
        RETURN QUERY SELECT * FROM beatflow_start_queued(v_dag.dag_id, v_dag.max_runs);
    END LOOP;
END
$fn$
