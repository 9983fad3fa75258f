"""A .map() expansion's fan-in without a chord: ``map_fan_ins``, one row per expansion, holding
how many instances it has (``total``), how many of them have ended (``final``) and what follows
the expander in its canvas (``canvas``: the Celery request fields a success would continue).

The instances are sent as a plain group. The statement that ends an instance adds one to
``final`` in the same transaction, and the one that makes it reach ``total`` returns the canvas:
that worker sends what follows. Before, every expansion was a chord (a chunk chord per 64
instances and ``celery.accumulate`` tasks under it), which cost each instance a chord-counter
script on the result backend and every message the chord's body.

The expander writes the row, recounting the instances already final under its lock, before it
sends any instance; a redelivered expander (the reconciler's resume, an operator's clear) does
the same, so a count that drifted (an instance ended by a writer that does not count, such as
``mark``) is put right, and a fan-in whose last worker died before sending is finished then.
Pruned with their runs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "map_fan_ins",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("final", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("canvas", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("dag_id", "run_id", "task_id", name="pk_map_fan_ins"),
    )


def downgrade() -> None:
    op.drop_table("map_fan_ins")
