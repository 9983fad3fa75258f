"""Node execution: a .map() task's expansion count and a cross-run dedupe pointer, out of band.

``task_runs.map_count``: how many instances a .map() task expanded into (NULL for every other
task run), so a user task returning ``{"map_count": n}`` is never read as an expansion.
``task_runs.deduped_from``: the run id whose task run did the side effect when a dedupe key
shared across runs made this run's task run final without running it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_runs") as batch:
        batch.add_column(sa.Column("map_count", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("deduped_from", sa.String(250), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_runs") as batch:
        batch.drop_column("deduped_from")
        batch.drop_column("map_count")
