"""A trigger can create its run already followed: ``beatflow_create_and_start`` takes
``p_followed`` (false by default) and writes it into the new row's ``followed`` (migration 0013).

A caller that waits for its run (``beatflow dags trigger --wait``, ``runs.trigger_and_follow``)
subscribes to the run's channel first, then triggers with the mark: the run's end is announced
without the follower's own write (``store.follow_dag_run``), a second transaction that ran while
the run's first task was on its way. A run id that exists already keeps its mark; its follower
marks it as before.

The old eight-argument call still resolves (to this function, with ``p_followed`` false), so
workers and clients of the previous release go on during a rolling upgrade.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from beatflow.store import functions

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

OLD_SIGNATURE = "text, text, timestamptz, text, json, timestamptz, bigint, integer"
NEW_SIGNATURE = f"{OLD_SIGNATURE}, boolean"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS beatflow_create_and_start({OLD_SIGNATURE})")
        op.execute(functions.load("beatflow_create_and_start", "0018"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS beatflow_create_and_start({NEW_SIGNATURE})")
        op.execute(functions.load("beatflow_create_and_start", "0015"))
