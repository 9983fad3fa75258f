"""Triggering in one round trip on PostgreSQL, and the dispatch of many DAGs in one.

``beatflow_create_and_start(...)`` inserts a queued DAG run (or finds the existing one) and,
when that run is queued, runs ``beatflow_start_queued`` for its DAG in the same transaction:
what a trigger did in two (create, then dispatch). Its rows: every run the dispatch started
(``is_started``), then the triggered run as it stands when it was not among them; ``is_new``
tells whether this call inserted it. The insert comes before the dispatch lock, so a trigger
never waits for a row lock while it holds that lock.

``beatflow_start_queued_many(dag_ids, maxes)`` runs ``beatflow_start_queued`` for each DAG in
one transaction (a beat's batch of fires). It takes the per-DAG locks in the order of their
keys (``hashtext(dag_id)``), the same for every caller, so two batches never deadlock (two DAG
ids whose keys collide share a lock, and still come in one order).

SQLite has no such functions; its BEGIN IMMEDIATE transactions do the same.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from beatflow.store import functions

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

CREATE_AND_START = functions.load("beatflow_create_and_start", "0008")

START_QUEUED_MANY = functions.load("beatflow_start_queued_many", "0008")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE_AND_START)
        op.execute(START_QUEUED_MANY)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS beatflow_start_queued_many(text[], integer[])")
        op.execute(
            "DROP FUNCTION IF EXISTS beatflow_create_and_start("
            "text, text, timestamptz, text, json, timestamptz, bigint, integer)"
        )
