"""A DAG's running runs as a count kept by the database: ``dag_run_counts``, one row per DAG, so
a dispatch reads one row to find its free slots instead of counting the DAG's running runs (up
to ``max_active_runs`` of them, which made a trigger O(running) for a DAG whose limit is in the
thousands).

Triggers on ``dag_runs`` keep the count: a row that becomes running adds one, a row that stops
being running (or is deleted while running) takes one away, in the transaction that changes the
row. Every writer is covered, beatflow's own statements and an operator's SQL alike; only
TRUNCATE and disabled triggers (``session_replication_role = replica``) bypass it, and the
``RECOUNT`` query below, on an emptied table, puts it right.

Locks: the count row is taken by the statement that changes a run, after that run's row, and
held to commit. The dispatch reads it without a lock after the DAG's dispatch lock, from a
snapshot taken after that lock, so it sees what the count-by-rows saw: the runs committed as
running. Nothing that holds a count row waits for the dispatch lock: a dispatch takes the
dispatch lock before anything (``beatflow_start_queued``, ``beatflow_finish_and_close``), and
every other writer changes one run in a transaction of its own. So no new wait cycle.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from beatflow.store import functions

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# the runs running when this revision is applied (the triggers count every change after it)
RECOUNT = (
    "INSERT INTO dag_run_counts (dag_id, running) "
    "SELECT dag_id, count(*) FROM dag_runs WHERE state = 'running' GROUP BY dag_id"
)

PG_COUNT_FUNCTION = functions.load("beatflow_count_running", "0012")

PG_TRIGGERS = (
    "CREATE TRIGGER dag_runs_count_insert AFTER INSERT ON dag_runs FOR EACH ROW "
    "WHEN (NEW.state = 'running') EXECUTE FUNCTION beatflow_count_running()",
    "CREATE TRIGGER dag_runs_count_update AFTER UPDATE OF state ON dag_runs FOR EACH ROW "
    "WHEN ((OLD.state = 'running') <> (NEW.state = 'running')) "
    "EXECUTE FUNCTION beatflow_count_running()",
    "CREATE TRIGGER dag_runs_count_delete AFTER DELETE ON dag_runs FOR EACH ROW "
    "WHEN (OLD.state = 'running') EXECUTE FUNCTION beatflow_count_running()",
)


# this revision: the free slots read off the count
PG_START_QUEUED = functions.load("beatflow_start_queued", "0012")
# for the downgrade: migration 0007's, the DAG's running runs counted up to the limit
PG_START_QUEUED_0007 = functions.load("beatflow_start_queued", "0012-downgrade")

# SQLite: the same three triggers; its writers take turns on the database's write lock
SQLITE_ADD = (
    "INSERT OR IGNORE INTO dag_run_counts (dag_id, running) VALUES (NEW.dag_id, 0); "
    "UPDATE dag_run_counts SET running = running + 1 WHERE dag_id = NEW.dag_id;"
)
SQLITE_TAKE = "UPDATE dag_run_counts SET running = running - 1 WHERE dag_id = OLD.dag_id;"
SQLITE_TRIGGERS = (
    "CREATE TRIGGER dag_runs_count_insert AFTER INSERT ON dag_runs "
    f"WHEN NEW.state = 'running' BEGIN {SQLITE_ADD} END",
    "CREATE TRIGGER dag_runs_count_start AFTER UPDATE OF state ON dag_runs "
    f"WHEN OLD.state <> 'running' AND NEW.state = 'running' BEGIN {SQLITE_ADD} END",
    "CREATE TRIGGER dag_runs_count_stop AFTER UPDATE OF state ON dag_runs "
    f"WHEN OLD.state = 'running' AND NEW.state <> 'running' BEGIN {SQLITE_TAKE} END",
    "CREATE TRIGGER dag_runs_count_delete AFTER DELETE ON dag_runs "
    f"WHEN OLD.state = 'running' BEGIN {SQLITE_TAKE} END",
)
SQLITE_TRIGGER_NAMES = (
    "dag_runs_count_insert",
    "dag_runs_count_start",
    "dag_runs_count_stop",
    "dag_runs_count_delete",
)


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        # no run changes state between the recount and the triggers (released at commit)
        op.execute("LOCK TABLE dag_runs IN SHARE ROW EXCLUSIVE MODE")
    op.create_table(
        "dag_run_counts",
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", name="pk_dag_run_counts"),
    )
    op.execute(RECOUNT)
    if postgresql:
        op.execute(PG_COUNT_FUNCTION)
        for trigger in PG_TRIGGERS:
            op.execute(trigger)
        op.execute(PG_START_QUEUED)
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_START_QUEUED_0007)
        for name in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS dag_runs_count_{name} ON dag_runs")
        op.execute("DROP FUNCTION IF EXISTS beatflow_count_running()")
    else:
        for name in SQLITE_TRIGGER_NAMES:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("dag_run_counts")
