"""Schema management through Alembic: upgrade to head, read the current revision, and refuse to
run against a database that is behind the code. Migrations live in ``migrations/`` (package data)
and run inside one transaction, serialised between processes by a lock."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from beatflow.errors import StoreError
from beatflow.store.backends import backend_for
from beatflow.store.engine import SQLITE_BEGIN

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "beatflow_alembic_version"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    """The migrations as Alembic reads them."""
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = script_directory().get_current_head()
    assert head is not None, f"no migrations under {MIGRATIONS}"
    return head


def revision_module(revision: str) -> ModuleType:
    """An earlier migration's module as Alembic loads it: a downgrade that restores a function
    reads that revision's text of it."""
    script = script_directory().get_revision(revision)
    assert script is not None and script.module is not None, f"no migration {revision}"
    module: ModuleType = script.module
    return module


def known_revisions() -> set[str]:
    return {s.revision for s in script_directory().walk_revisions()}


def current_revision(connection: sa.Connection) -> str | None:
    """The revision the database is at; None for a database beatflow never upgraded."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def migrate(engine: sa.Engine, target: str = "head", *, downgrade: bool = False) -> str | None:
    """Upgrade (or downgrade) to ``target`` in one transaction; return the revision reached."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
        with conn.begin():
            backend_for(conn.dialect.name).lock_migrations(conn)
            config = alembic_config(conn)
            try:
                if downgrade:
                    command.downgrade(config, target)
                else:
                    command.upgrade(config, target)
            except CommandError as exc:
                raise StoreError(
                    f"cannot migrate the results database to {target}: {exc}; if the database "
                    "was upgraded by a newer beatflow, upgrade beatflow here too"
                ) from exc
            return current_revision(conn)
