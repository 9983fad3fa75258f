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

from beatflow.store import functions

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

START_QUEUED = functions.load("beatflow_start_queued", "0015")

CREATE_AND_START = functions.load("beatflow_create_and_start", "0015")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(START_QUEUED)
        op.execute(CREATE_AND_START)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(functions.load("beatflow_start_queued", "0012"))
        op.execute(functions.load("beatflow_create_and_start", "0008"))
