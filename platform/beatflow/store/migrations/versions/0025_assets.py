"""Assets (data-aware scheduling): ``asset_events``, one row per update of an asset (a
producing task run's success, keyed so a redelivered task records it once, or an event from
outside), and ``asset_consumptions``, one row per (DAG, event) an asset-triggered run consumed,
written in the run's transaction: its primary key lets each event trigger each DAG at most once.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "asset_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("asset", sa.String(250), nullable=False),
        sa.Column("source_key", sa.String(1300), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=True),
        sa.Column("run_id", sa.String(250), nullable=True),
        sa.Column("task_id", sa.String(250), nullable=True),
        sa.Column("actor", sa.String(250), nullable=True),
        sa.Column("extra", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_asset_events"),
        sa.UniqueConstraint("source_key", name="uq_asset_events_source_key"),
    )
    op.create_index("ix_asset_events_asset_id", "asset_events", ["asset", "id"])
    op.create_table(
        "asset_consumptions",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "event_id", name="pk_asset_consumptions"),
    )


def downgrade() -> None:
    op.drop_table("asset_consumptions")
    op.drop_index("ix_asset_events_asset_id", table_name="asset_events")
    op.drop_table("asset_events")
