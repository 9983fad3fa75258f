"""Pools: named slot limits shared by every worker (``pools``), and each pooled task run's hold
on or wait for its pool's slots (``pool_slots``). A hold counts while its task run is
``running`` under the hold's lease token: the finish (any end of the row) or a takeover gives
the slots back in the statement that changes the row.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(250), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("updated_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_pools"),
    )
    op.create_table(
        "pool_slots",
        sa.Column("dedupe_key", sa.String(1000), nullable=False),
        sa.Column("pool", sa.String(250), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("since", Ts, nullable=False),
        sa.Column("seen_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("dedupe_key", name="pk_pool_slots"),
    )
    op.create_index("ix_pool_slots_pool_state", "pool_slots", ["pool", "state"])
    op.create_index("ix_pool_slots_dag_id_run_id", "pool_slots", ["dag_id", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_pool_slots_dag_id_run_id", table_name="pool_slots")
    op.drop_index("ix_pool_slots_pool_state", table_name="pool_slots")
    op.drop_table("pool_slots")
    op.drop_table("pools")
