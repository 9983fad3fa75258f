"""The PostgreSQL functions as the migrations leave them, at every revision, up and down: the
same, definition for definition (``pg_get_functiondef``), as the snapshot taken from the
migrations before their function bodies moved to ``store/functions/*.sql``. A body edited in
place, or a migration that loads another revision's file, changes a definition and fails here.

Regenerate (only for a new migration, never to make an edit pass):
``python -m tests.integration.store.test_function_bodies <empty PostgreSQL URL>``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sqlalchemy as sa

from beatflow.store import functions, schema
from beatflow.store.engine import create_engine

SNAPSHOT = Path(__file__).parent / "data" / "pg_functions.json"
DEFINITIONS = sa.text(
    "SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS definition "
    "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = current_schema() AND p.proname LIKE 'beatflow%' ORDER BY 1"
)


def definitions(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {row.signature: row.definition for row in conn.execute(DEFINITIONS)}


def walk(url: str) -> dict[str, dict[str, str]]:
    """The functions after each upgrade step from base to head, then each downgrade step back
    (keys ``up <revision>`` and ``down <revision>``)."""
    engine = create_engine(url)
    try:
        order = [s.revision for s in schema.script_directory().walk_revisions()][::-1]
        out: dict[str, dict[str, str]] = {}
        for revision in order:
            schema.migrate(engine, revision)
            out[f"up {revision}"] = definitions(engine)
        for revision in [*order[-2::-1], "base"]:
            schema.migrate(engine, revision, downgrade=True)
            out[f"down {revision}"] = definitions(engine)
        return out
    finally:
        engine.dispose()


def test_every_revision_leaves_the_functions_it_left_before_their_bodies_moved_to_files(
    postgres_url: str,
) -> None:
    expected = json.loads(SNAPSHOT.read_text())
    got = walk(postgres_url)
    assert list(got) == list(expected)
    for step, functions_then in expected.items():
        assert got[step] == functions_then, step


def test_the_newest_file_of_each_function_is_its_body_at_head(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        schema.migrate(engine, "head")
        at_head = definitions(engine)
    finally:
        engine.dispose()
    assert {s.split("(")[0] for s in at_head} == set(functions.names())
    for name in functions.names():
        (definition,) = (d for s, d in at_head.items() if s.split("(")[0] == name)
        body = functions.current(name).split("$fn$")[1]
        assert body in definition, name


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(walk(sys.argv[1]), indent=1, sort_keys=False) + "\n")
