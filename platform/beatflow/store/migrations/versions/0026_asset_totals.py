"""Asset totals: ``asset_event_totals`` (per asset and source) and ``asset_run_totals`` (per
DAG) keep the counts of the asset events and the asset-triggered runs that ``beatflow db prune``
deleted, folded in by the prune's own transactions, so the exporter's counters (totals plus
the rows left) never go down.

Downgrading drops them: the counts of pruned events go with them (the exporter's counters then
restart lower, which Prometheus reads as a counter reset).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "asset_event_totals",
        sa.Column("asset", sa.String(250), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("asset", "source", name="pk_asset_event_totals"),
    )
    op.create_table(
        "asset_run_totals",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("runs", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", name="pk_asset_run_totals"),
    )


def downgrade() -> None:
    op.drop_table("asset_run_totals")
    op.drop_table("asset_event_totals")
