"""Run lifecycle: how often the reconciler resumed it, the index that makes
dispatching the next queued run O(slots), and the audit table of operators' actions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True)
Json = sa.JSON(none_as_null=True)


def upgrade() -> None:
    with op.batch_alter_table("dag_runs") as batch:
        batch.add_column(
            sa.Column("resume_count", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("resume_after", Ts, nullable=True))
    op.create_index(
        "ix_dag_runs_dag_id_state_logical_date", "dag_runs", ["dag_id", "state", "logical_date"]
    )
    op.create_table(
        "audit_events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("at", Ts, nullable=False),
        sa.Column("actor", sa.String(250), nullable=False),
        sa.Column("action", sa.String(50), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=True),
        sa.Column("run_id", sa.String(250), nullable=True),
        sa.Column("detail", Json, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )
    op.create_index("ix_audit_events_dag_id_run_id", "audit_events", ["dag_id", "run_id"])
    op.create_index("ix_audit_events_at", "audit_events", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_index("ix_audit_events_dag_id_run_id", table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index("ix_dag_runs_dag_id_state_logical_date", table_name="dag_runs")
    with op.batch_alter_table("dag_runs") as batch:
        batch.drop_column("resume_after")
        batch.drop_column("resume_count")
