"""Notifications: the outbox of notifier events (``beatflow.notify``). A task's or a DAG run's
end writes one row per notifier once its state is committed (``pending``); the one delivery
that moves it to ``sending`` sends it, then marks it ``sent`` or ``failed``. The event key
(dag/run/task/map index/try/event/notifier) is the primary key: a redelivered or duplicated
event inserts nothing (INSERT ... ON CONFLICT DO NOTHING) and sends nothing.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("event_key", sa.String(1024), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("payload", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("claimed_at", Ts, nullable=True),
        sa.Column("ended_at", Ts, nullable=True),
        sa.Column("tries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("event_key", name="pk_notifications"),
    )
    op.create_index("ix_notifications_state_created_at", "notifications", ["state", "created_at"])
    op.create_index("ix_notifications_dag_id_run_id", "notifications", ["dag_id", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_notifications_dag_id_run_id", table_name="notifications")
    op.drop_index("ix_notifications_state_created_at", table_name="notifications")
    op.drop_table("notifications")
