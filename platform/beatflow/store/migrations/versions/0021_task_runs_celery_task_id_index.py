"""Task runs are found by their Celery task id: ``beatflow.task_value(async_result)`` reads the
value a DAG task returned from the results DB, given only what a Celery user holds (the
``AsyncResult`` or its id). The index keeps that one lookup a point read on any history.

On PostgreSQL the build reads ``task_runs`` once and holds off its writes (not its reads) for
that time: on a large history, upgrade while the workers are quiet.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

NAME = "ix_task_runs_celery_task_id"


def upgrade() -> None:
    op.create_index(NAME, "task_runs", ["celery_task_id"])


def downgrade() -> None:
    op.drop_index(NAME, table_name="task_runs")
