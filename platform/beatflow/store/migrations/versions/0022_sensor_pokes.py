"""A sensor's pokes in reschedule mode: ``sensor_pokes``, one row per sensor task run, written
with the ``up_for_reschedule`` row of each poke that was not done (one transaction): the try the
pokes belong to, how many were made, the first poke's time (the sensor's timeout runs from it)
and the next poke's (a sensor whose next poke is overdue and whose message was lost is re-sent by
the reconciler). Pruned with their runs.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sensor_pokes",
        sa.Column("dedupe_key", sa.String(1000), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("poke_count", sa.Integer(), nullable=False),
        sa.Column("first_poke_at", Ts, nullable=False),
        sa.Column("next_poke_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("dedupe_key", name="pk_sensor_pokes"),
    )
    op.create_index("ix_sensor_pokes_dag_id_run_id", "sensor_pokes", ["dag_id", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_sensor_pokes_dag_id_run_id", table_name="sensor_pokes")
    op.drop_table("sensor_pokes")
