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

from beatflow.store import functions

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FUNCTION = functions.load("beatflow_start_queued", "0007")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS beatflow_start_queued(text, integer)")
