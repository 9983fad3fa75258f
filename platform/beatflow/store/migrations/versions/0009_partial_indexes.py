"""Fewer index writes per state change: the indexes only running rows need hold only running rows.

Every state change of a DAG run or a task run is a non-HOT update (``state`` is indexed), so it
writes a new entry into every index of its table. Two of those indexes are only ever read for
running rows, and one is redundant:

- ``ix_dag_runs_dag_id_state`` is a prefix of ``ix_dag_runs_dag_id_state_logical_date``, which
  serves every query it served: dropped.
- the free-slot count of a dispatch (a DAG's running runs) reads
  ``ix_dag_runs_running_dag_id``, ``(dag_id) WHERE state = 'running'``: it walks that DAG's
  running runs alone, where ``(state, id)`` made it walk every DAG's;
- the stuck-task-run count reads ``ix_task_runs_running_lease_expires_at``,
  ``(lease_expires_at) WHERE state = 'running'``, in place of ``(state, lease_expires_at)``: a
  task run's final state no longer writes an entry there.

The queries that use them name the state as a literal (a partial index is used only when the
query's own text implies its predicate, not a bound parameter's value).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

RUNNING = sa.text("state = 'running'")


def upgrade() -> None:
    op.drop_index("ix_dag_runs_dag_id_state", table_name="dag_runs")
    op.create_index(
        "ix_dag_runs_running_dag_id",
        "dag_runs",
        ["dag_id"],
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )
    op.drop_index("ix_task_runs_state_lease_expires_at", table_name="task_runs")
    op.create_index(
        "ix_task_runs_running_lease_expires_at",
        "task_runs",
        ["lease_expires_at"],
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_task_runs_running_lease_expires_at", table_name="task_runs")
    op.create_index(
        "ix_task_runs_state_lease_expires_at", "task_runs", ["state", "lease_expires_at"]
    )
    op.drop_index("ix_dag_runs_running_dag_id", table_name="dag_runs")
    op.create_index("ix_dag_runs_dag_id_state", "dag_runs", ["dag_id", "state"])
