"""Initial schema: dag_runs, task_runs, dead_letters, dag_states.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True)
Json = sa.JSON(none_as_null=True)


def upgrade() -> None:
    op.create_table(
        "dag_runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("logical_date", Ts, nullable=True),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("conf", Json, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("queued_at", Ts, nullable=False),
        sa.Column("started_at", Ts, nullable=True),
        sa.Column("ended_at", Ts, nullable=True),
        sa.Column("leader_epoch", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_dag_runs"),
        sa.UniqueConstraint("dag_id", "run_id", name="uq_dag_runs_dag_id_run_id"),
    )
    op.create_index("ix_dag_runs_dag_id_state", "dag_runs", ["dag_id", "state"])
    op.create_index("ix_dag_runs_dag_id_logical_date", "dag_runs", ["dag_id", "logical_date"])
    op.create_index("ix_dag_runs_queued_at", "dag_runs", ["queued_at"])
    op.create_index("ix_dag_runs_state_ended_at", "dag_runs", ["state", "ended_at"])

    op.create_table(
        "task_runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dedupe_key", sa.String(1000), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(250), nullable=True),
        sa.Column("celery_task_id", sa.String(250), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", Ts, nullable=True),
        sa.Column("started_at", Ts, nullable=True),
        sa.Column("ended_at", Ts, nullable=True),
        sa.Column("result", Json, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_task_runs"),
        sa.UniqueConstraint("dedupe_key", name="uq_task_runs_dedupe_key"),
    )
    op.create_index("ix_task_runs_dag_id_run_id", "task_runs", ["dag_id", "run_id"])
    op.create_index(
        "ix_task_runs_state_lease_expires_at", "task_runs", ["state", "lease_expires_at"]
    )

    op.create_table(
        "dead_letters",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dedupe_key", sa.String(1000), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("args", Json, nullable=False),
        sa.Column("conf", Json, nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("replayed_at", Ts, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
    )
    op.create_index("ix_dead_letters_dag_id_run_id", "dead_letters", ["dag_id", "run_id"])
    op.create_index("ix_dead_letters_replayed_at_dag_id", "dead_letters", ["replayed_at", "dag_id"])

    op.create_table(
        "dag_states",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("updated_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("dag_id", name="pk_dag_states"),
    )


def downgrade() -> None:
    op.drop_table("dag_states")
    op.drop_table("dead_letters")
    op.drop_table("task_runs")
    op.drop_table("dag_runs")
