"""Triggering in one round trip on PostgreSQL, and the dispatch of many DAGs in one.

``beatflow_create_and_start(...)`` inserts a queued DAG run (or finds the existing one) and,
when that run is queued, runs ``beatflow_start_queued`` for its DAG in the same transaction:
what a trigger did in two (create, then dispatch). Its rows: every run the dispatch started
(``is_started``), then the triggered run as it stands when it was not among them; ``is_new``
tells whether this call inserted it. The insert comes before the dispatch lock, so a trigger
never waits for a row lock while it holds that lock.

``beatflow_start_queued_many(dag_ids, maxes)`` runs ``beatflow_start_queued`` for each DAG in
one transaction (a beat's batch of fires). It takes the per-DAG locks in the order of their
keys (``hashtext(dag_id)``), the same for every caller, so two batches never deadlock (two DAG
ids whose keys collide share a lock, and still come in one order).

SQLite has no such functions; its BEGIN IMMEDIATE transactions do the same.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

CREATE_AND_START = """
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
"""

START_QUEUED_MANY = """
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
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE_AND_START)
        op.execute(START_QUEUED_MANY)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS beatflow_start_queued_many(text[], integer[])")
        op.execute(
            "DROP FUNCTION IF EXISTS beatflow_create_and_start("
            "text, text, timestamptz, text, json, timestamptz, bigint, integer)"
        )
