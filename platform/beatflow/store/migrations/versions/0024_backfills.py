"""Backfills: one row per backfill asked through the CLI, the API or the UI. Its ``plan`` holds
the runs it creates or re-runs, oldest first, and ``released`` how many of them it has let go
so far: at most ``max_active_runs`` of its runs are queued or running at once, the rest wait in
the plan (not as queued runs), so its cap holds whatever else dispatches the DAG.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "backfills",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("start", Ts, nullable=False),
        sa.Column("end", Ts, nullable=False),
        sa.Column("reprocess", sa.String(20), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("conf", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("plan", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("released", sa.Integer(), server_default="0", nullable=False),
        sa.Column("actor", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("ended_at", Ts, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_backfills"),
    )
    op.create_index("ix_backfills_dag_id_id", "backfills", ["dag_id", "id"])
    op.create_index("ix_backfills_state", "backfills", ["state"])


def downgrade() -> None:
    op.drop_index("ix_backfills_state", table_name="backfills")
    op.drop_index("ix_backfills_dag_id_id", table_name="backfills")
    op.drop_table("backfills")
