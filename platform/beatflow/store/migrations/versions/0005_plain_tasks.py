"""Durable dedupe rows for plain Celery tasks (Idempotent): no schema change. Idempotent keeps
its rows in ``task_runs`` under the DAG id ``<plain>`` (run_id and task_id hold the Celery task's
name) and uses the same claim protocol as DAG task runs (see beatflow/plain.py); the revision
stays so the chain of revisions is the same on every install.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
