"""Beat fencing and plain periodic tasks: the newest leader epoch (``beat_terms``), and the reason
a scheduled DAG run was recorded as failed without running (``dag_runs.failure_reason``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "beat_terms",
        sa.Column("name", sa.String(50), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_beat_terms")),
    )
    with op.batch_alter_table("dag_runs") as batch:
        batch.add_column(sa.Column("failure_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dag_runs") as batch:
        batch.drop_column("failure_reason")
    op.drop_table("beat_terms")
