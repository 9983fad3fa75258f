"""A run's last task run, its close and the dispatch of the DAG's waiting runs in one round trip
on PostgreSQL: ``beatflow_finish_and_close(...)``.

It takes the DAG's dispatch lock first (the transaction-scoped advisory lock of
``beatflow_start_queued``), then records the task run's success under its lease, ends the DAG
run, and starts the oldest queued runs that now fit. Holding the lock from before the close is
what lets the look for queued runs happen in the same transaction: a trigger that committed a
queued run either dispatched before this call took the lock (and this call's later statements,
each with a new snapshot, see that run) or dispatches after this call commits (and sees the run
ended, its slot free). Without the lock, a look from the closing statement's own snapshot could
miss a run queued while a dispatch still counted the closing run as running.

Rows: ``kind`` 'lost' (the lease was taken over: nothing written), 'written' (the task run
recorded, the DAG run had ended already), 'closed' (with the run as this call ended it), then
one 'started' row per run the dispatch started.

The lock comes before any row lock here, as in every other holder of it, so no holder waits for
the lock while it holds a row another holder needs.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from beatflow.store import functions

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

FUNCTION = functions.load("beatflow_finish_and_close", "0010")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION IF EXISTS beatflow_finish_and_close("
            "text, text, json, timestamptz, text, text, text, integer)"
        )
