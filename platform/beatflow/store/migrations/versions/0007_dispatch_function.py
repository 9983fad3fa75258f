"""Dispatch in one round trip on PostgreSQL: ``beatflow_start_queued(dag_id, max)`` takes
the per-DAG dispatch lock (a transaction-scoped advisory lock), then starts the oldest queued
runs that fit under ``max`` running ones and returns them. A VOLATILE PL/pgSQL function takes a
new snapshot for each statement, so the count it starts from follows the lock, as the
transaction it replaces did (BEGIN, lock, update, COMMIT: four round trips), and the start time
is read after the lock (``clock_timestamp()``), so a dispatcher that waited for the lock never
stamps a later run with an earlier start. SQLite has no such function; its BEGIN IMMEDIATE
transaction stays.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FUNCTION = """
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
            LIMIT greatest(0, p_max - (
                SELECT count(*) FROM (
                    SELECT 1 FROM dag_runs r
                    WHERE r.dag_id = p_dag_id AND r.state = 'running'
                    LIMIT p_max
                ) AS capped
            ))
        ) AND dag_runs.state = 'queued'
        RETURNING dag_runs.*
    )
    SELECT * FROM started;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS beatflow_start_queued(text, integer)")
