"""Verbs keep their promises: a cleared or replayed task run gets its full retry policy, and a
dead letter that no longer stands cannot be replayed.

``task_runs.tries_before``: the tries made before the last clear or replay of the task run; the
retry policy counts only the tries after them (a task with ``retries=2`` cleared after its
third try runs tries 4, 5 and 6), while try numbers keep growing so each try keeps its logs.

``dead_letters.closed_at`` and ``closed_reason``: a letter closed without a replay, and why (its
run was marked by an operator, its task cleared, or a newer letter of the same task run
superseded it). Replaying a closed letter is refused with that reason.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # constant defaults and nullable columns: no table rewrite on PostgreSQL 11+, allowed by
    # SQLite's ADD COLUMN
    op.add_column(
        "task_runs",
        sa.Column("tries_before", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("dead_letters", sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("dead_letters", sa.Column("closed_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite 3.35+ drops a column in place (a batch copy would drop the count triggers)
    op.execute("ALTER TABLE dead_letters DROP COLUMN closed_reason")
    op.execute("ALTER TABLE dead_letters DROP COLUMN closed_at")
    op.execute("ALTER TABLE task_runs DROP COLUMN tries_before")
