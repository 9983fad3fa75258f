"""The PostgreSQL functions the migrations create, one file per function and per revision that
(re)wrote it: ``functions/<name>/<revision>.sql``. A migration loads the text as of its own
revision, so it keeps producing exactly what it produced; a function's newest file is its
current body (the one ``alembic upgrade head`` leaves)."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

_HERE: Traversable = files(__name__)


def load(name: str, revision: str) -> str:
    """The ``CREATE OR REPLACE FUNCTION`` statement of ``name`` as revision ``revision`` wrote
    it (a missing file is a packaging bug: FileNotFoundError names it)."""
    return (_HERE / name / f"{revision}.sql").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every function the migrations create, by name."""
    return sorted(e.name for e in _HERE.iterdir() if e.is_dir() and not e.name.startswith("_"))


def revisions(name: str) -> list[str]:
    """The revisions that (re)wrote ``name``, oldest first."""
    found = (e.name.removesuffix(".sql") for e in (_HERE / name).iterdir())
    return sorted(r for r in found if r.isdigit())


def current(name: str) -> str:
    """``name``'s body as of the newest revision that wrote it."""
    return load(name, revisions(name)[-1])
