"""A .map() task's items, one row per instance, written when the task expands: an instance
reads its own item by key instead of ``result -> i`` on its source's whole result, which
PostgreSQL's JSON parser walks in full on every read (O(width) per instance, O(width²) per map).
Runs expanded before this revision have no rows; their instances still read ``result -> i``.
Pruned with their runs.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "map_items",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("item", sa.JSON(none_as_null=False), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "run_id", "task_id", "map_index", name="pk_map_items"),
    )


def downgrade() -> None:
    op.drop_table("map_items")
