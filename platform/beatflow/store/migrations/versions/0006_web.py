"""Web UI: task logs (captured per try, size-capped, pruned with their runs) and the indexes
behind the paginated pages (a DAG's newest runs, runs by state).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True)
Json = sa.JSON(none_as_null=True)


def upgrade() -> None:
    op.create_table(
        "task_logs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("lines", Json, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_task_logs"),
    )
    op.create_index(
        "ix_task_logs_dag_id_run_id_task_id_map_index_try_number_id",
        "task_logs",
        ["dag_id", "run_id", "task_id", "map_index", "try_number", "id"],
    )
    op.create_index("ix_task_logs_created_at", "task_logs", ["created_at"])
    op.create_index("ix_dag_runs_dag_id_id", "dag_runs", ["dag_id", "id"])
    op.create_index("ix_dag_runs_state_id", "dag_runs", ["state", "id"])


def downgrade() -> None:
    op.drop_index("ix_dag_runs_state_id", table_name="dag_runs")
    op.drop_index("ix_dag_runs_dag_id_id", table_name="dag_runs")
    op.drop_index("ix_task_logs_created_at", table_name="task_logs")
    op.drop_index(
        "ix_task_logs_dag_id_run_id_task_id_map_index_try_number_id", table_name="task_logs"
    )
    op.drop_table("task_logs")
