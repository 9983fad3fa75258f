"""Queued runs in an index of their own, and the history indexes without the active runs.

Every close of a run asks whether its DAG has a run queued (``beatflow_start_queued``, and a
trigger's fast path in ``beatflow_create_and_start``), and a dispatch takes the DAG's oldest
queued runs in ``(logical_date, id)`` order. When a busy minute has queued a thousand runs of
fifty DAGs, the statistics of the last ANALYZE still say queued rows are rare, and PostgreSQL
answered ``dag_id = $1 AND state = 'queued'`` through ``(state, id)``, filtering on the DAG: a
thousand entries read per close while the queue drained, quadratic in the queue (the beat row of
bench/RESULTS.md, session 14: 547 rows fetched per task run).

- ``ix_dag_runs_queued_dag_id``, ``(dag_id, logical_date, id) WHERE state = 'queued'``: the
  lookup reads the DAG's own queued entries, the dispatch's ORDER BY ... LIMIT the first of
  them, and the reconciler's "DAGs with queued runs" the queued rows alone. It replaces
  ``ix_dag_runs_dag_id_state_logical_date``, which served only that lookup and dispatch.
- An index on ``state`` that also holds queued rows stays a cheaper-looking path whenever the
  statistics say they are rare (a freshly inserted row's page is not yet all-visible, so an
  index-only scan is costed with heap fetches). So on PostgreSQL ``ix_dag_runs_state_id`` (a
  state's runs newest first, across DAGs: the runs page) now holds only the final states; a
  page of queued or running runs reads their small partial indexes. SQLite uses a partial index
  only when the query names its predicate, so there it stays whole; its planner prefers the
  partial one for the lookup by itself (it halves a partial index's row estimate).
- ``ix_dag_runs_state_ended_at`` served the prune alone, which reads finished runs in
  ``ended_at`` order: ``ix_dag_runs_ended_at``, ``(ended_at) WHERE ended_at IS NOT NULL``, is
  that order without the states to merge, and holds no active run.

A run's start (queued -> running) then writes no entry into either history index, and its end
none into the queued one. The queries that use a partial index name its state as a literal, as
those of migration 0009 do.

``beatflow_start_queued`` updated ``WHERE id IN (the oldest queued ids) AND state = 'queued'``.
With queued rows looking rare, PostgreSQL drove that from the outer ``state = 'queued'``: every
DAG's queued entries, each joined to the subquery (2,000 entries read to start one run). It now
takes the oldest queued runs ``FOR UPDATE`` in a materialised CTE and updates those rows by id:
a row that changed after the snapshot (a cancel) is rechecked as it is locked and left out, and
the update has only the ids to go by. The lock sits under the LIMIT, so a run cancelled while the
dispatch waited for its row gives its slot to the next queued run; before, the recheck left the
run out and the slot unused until the next close or the reconciler.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from beatflow.store import functions

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

QUEUED = sa.text("state = 'queued'")
FINAL = sa.text("state NOT IN ('queued', 'running')")
ENDED = sa.text("ended_at IS NOT NULL")


START_QUEUED = functions.load("beatflow_start_queued", "0016")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(START_QUEUED)
    op.create_index(
        "ix_dag_runs_queued_dag_id",
        "dag_runs",
        ["dag_id", "logical_date", "id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.drop_index("ix_dag_runs_dag_id_state_logical_date", table_name="dag_runs")
    op.drop_index("ix_dag_runs_state_id", table_name="dag_runs")
    op.create_index("ix_dag_runs_state_id", "dag_runs", ["state", "id"], postgresql_where=FINAL)
    op.create_index(
        "ix_dag_runs_ended_at", "dag_runs", ["ended_at"], postgresql_where=ENDED, sqlite_where=ENDED
    )
    op.drop_index("ix_dag_runs_state_ended_at", table_name="dag_runs")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(functions.load("beatflow_start_queued", "0015"))
    op.create_index("ix_dag_runs_state_ended_at", "dag_runs", ["state", "ended_at"])
    op.drop_index("ix_dag_runs_ended_at", table_name="dag_runs")
    op.drop_index("ix_dag_runs_state_id", table_name="dag_runs")
    op.create_index("ix_dag_runs_state_id", "dag_runs", ["state", "id"])
    op.create_index(
        "ix_dag_runs_dag_id_state_logical_date", "dag_runs", ["dag_id", "state", "logical_date"]
    )
    op.drop_index("ix_dag_runs_queued_dag_id", table_name="dag_runs")
