"""A trigger that finds a free slot and nothing queued inserts its run as running, without the
dispatch lock: one insert where it took an insert, the lock and an update (a second write of the
row into each of ``dag_runs``' indexes), and no wait behind a closing run's commit.

``beatflow_create_and_start`` looks first, without a lock, at the DAG's running count and for a
queued run of it. With a slot free and none queued, the insert writes the run as running; the
count trigger (migration 0012) adds it under the count row's lock, held to commit, so what the
function reads of the count next is exact: every running run committed, and this one. Over
``p_max`` (a racing trigger or dispatch took the slot between the look and the insert), the run
goes back to queued in the same transaction and is returned as not started: the others counted
are running, and each one's end takes the count row after this commit and then dispatches, so
one of them starts it (and the reconciler behind them). Otherwise (a slot taken, a run queued, a
run id that exists) it does what it did: a queued insert, then the dispatch under the lock.

The fast path holds the count row and never waits for the dispatch lock afterwards, so the lock
order stays: the dispatch lock, then the count row. For that, ``beatflow_start_queued`` now
reads the count row ``FOR UPDATE`` under the dispatch lock (creating it at 0 when the DAG has
none): a dispatch's count can no longer miss a run inserted as running and not yet committed
(it waits for that commit), so a dispatch and a fast trigger never exceed the limit together.
With nothing queued it returns before taking the row: a closer's common case.

SQLite has neither function; its BEGIN IMMEDIATE transactions serialise every trigger.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from beatflow.store.schema import revision_module

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

START_QUEUED = """
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
    WITH started AS (
        UPDATE dag_runs
        SET state = 'running', started_at = coalesce(dag_runs.started_at, clock_timestamp())
        WHERE dag_runs.id IN (
            SELECT q.id FROM dag_runs q
            WHERE q.dag_id = p_dag_id AND q.state = 'queued'
            ORDER BY q.logical_date, q.id
            LIMIT greatest(0, p_max - v_running)
        ) AND dag_runs.state = 'queued'
        RETURNING dag_runs.*
    )
    SELECT * FROM started;
END
$fn$
"""

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
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(START_QUEUED)
        op.execute(CREATE_AND_START)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(revision_module("0012").PG_START_QUEUED)
        op.execute(revision_module("0008").CREATE_AND_START)
