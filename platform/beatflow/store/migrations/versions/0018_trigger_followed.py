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

from beatflow.store.schema import revision_module

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

OLD_SIGNATURE = "text, text, timestamptz, text, json, timestamptz, bigint, integer"
NEW_SIGNATURE = f"{OLD_SIGNATURE}, boolean"


def _create_and_start() -> str:
    """0015's function with the parameter and the column added (every edit must apply once)."""
    text: str = revision_module("0015").CREATE_AND_START
    edits = (
        (
            "p_leader_epoch bigint, p_max integer\n)",
            "p_leader_epoch bigint, p_max integer,\n    p_followed boolean DEFAULT false\n)",
        ),
        ("started_at, leader_epoch)", "started_at, leader_epoch, followed)"),
        (
            "CASE WHEN v_fast THEN clock_timestamp() END, p_leader_epoch)",
            "CASE WHEN v_fast THEN clock_timestamp() END, p_leader_epoch,\n"
            "            coalesce(p_followed, false))",
        ),
    )
    for old, new in edits:
        assert text.count(old) == 1, f"0015's beatflow_create_and_start changed: {old!r}"
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS beatflow_create_and_start({OLD_SIGNATURE})")
        op.execute(_create_and_start())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS beatflow_create_and_start({NEW_SIGNATURE})")
        op.execute(revision_module("0015").CREATE_AND_START)
