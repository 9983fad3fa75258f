"""Whether anyone follows a DAG run: ``dag_runs.followed``, set by a follower (``follow_run``,
``beatflow dags trigger --wait``) before its first read, so the worker that ends the run
publishes the wake-up on Redis only when someone listens (one round trip less per DAG run in
a worker for the runs nobody follows, most of them).

No follower misses its run's end: the follower's UPDATE and the close's UPDATE take the run's
row in turn. When the follower's comes first, the close's RETURNING row carries
``followed`` (PostgreSQL returns the row as it is after the lock wait; SQLite's writers take
turns on its write lock) and the worker announces; when the close comes first, the follower's
own UPDATE ... RETURNING shows the run final and it returns at once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a constant default: no table rewrite on PostgreSQL 11+, allowed by SQLite's ADD COLUMN
    op.add_column(
        "dag_runs",
        sa.Column("followed", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    # SQLite 3.35+ drops a column in place (a batch copy would drop the count triggers)
    op.execute("ALTER TABLE dag_runs DROP COLUMN followed")
