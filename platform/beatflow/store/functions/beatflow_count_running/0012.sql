CREATE OR REPLACE FUNCTION beatflow_count_running() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    v_dag text;
    v_delta integer;
BEGIN
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.state = 'running') THEN
        v_dag := NEW.dag_id;
        v_delta := 1;
    ELSE
        v_dag := OLD.dag_id;
        v_delta := -1;
    END IF;
    INSERT INTO dag_run_counts AS c (dag_id, running) VALUES (v_dag, v_delta)
    ON CONFLICT (dag_id) DO UPDATE SET running = c.running + EXCLUDED.running;
    RETURN NULL;
END
$fn$
