"""The running task runs' index serves only the scans for expired leases, never a finish.

A task run's finish, its lease renewal and a closing task's ``beatflow_finish_and_close`` find
its row by ``dedupe_key = $1 AND lease_token = $2 AND state = 'running'``. That condition implies
the predicate of ``ix_task_runs_running_lease_expires_at`` (``state = 'running'``), so when the
last ANALYZE found no task run running (a quiet hour), PostgreSQL costed that index as empty and
answered every finish through it, filtering on the key: every task run running read per finish.
With 5,000 running on other workers, 5,003 entries for one finish where the key's unique index
reads one; a 10,000-wide map finishing across a large cluster reads O(width) per instance.

The index now holds the same rows under ``state = 'running' AND lease_expires_at IS NOT NULL``
(a running row always has a lease). The scans it is for bound ``lease_expires_at`` with a strict
comparison (``<`` the stuck-run count, ``>`` a run's live leases), which implies ``IS NOT
NULL``: they read it as before. A finish or a renewal does not name the lease's expiry, cannot
use it, and goes by the key. SQLite matches a partial index by the same rule.

On PostgreSQL the new index is built beside the old one and takes its name after: the build
reads ``task_runs`` once (a partial index is built from a scan of the whole table) and holds
off its writes, not its reads, for that time; only the swap at the end holds off both, for a
moment. On a large history, upgrade while the workers are quiet.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NAME = "ix_task_runs_running_lease_expires_at"
RUNNING = sa.text("state = 'running'")
RUNNING_LEASED = sa.text("state = 'running' AND lease_expires_at IS NOT NULL")


def _index(where: sa.TextClause) -> None:
    if op.get_bind().dialect.name != "postgresql":  # SQLite: its one writer waits either way
        op.drop_index(NAME, table_name="task_runs")
        op.create_index(NAME, "task_runs", ["lease_expires_at"], sqlite_where=where)
        return
    # built first (a SHARE lock: reads go on), then swapped in (a moment's exclusive lock)
    op.create_index(f"{NAME}_next", "task_runs", ["lease_expires_at"], postgresql_where=where)
    op.drop_index(NAME, table_name="task_runs")
    op.execute(f"ALTER INDEX {NAME}_next RENAME TO {NAME}")


def upgrade() -> None:
    _index(RUNNING_LEASED)


def downgrade() -> None:
    _index(RUNNING)
