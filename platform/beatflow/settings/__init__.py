"""One frozen Settings object, built from ``BEATFLOW_*`` variables (on pydantic-settings), and
the Celery and RedBeat configuration derived from it. The only package that reads the
environment; imports nothing of ours but errors, keys and celery_passthrough (and connections,
lazily, for URLs).

- ``model``: the Settings fields, ``from_env``, ``replace``, the masked view
- ``values``: how each variable's text is read; ``mask_url``, ``psycopg_url``, ``parse_tokens``
- ``source``: the environment source (``<VAR>_FILE`` secrets, unknown-variable warnings)
- ``checks``: the cross-field checks; ``celery``: ``celery_config``
"""

from __future__ import annotations

from beatflow.settings.model import Settings
from beatflow.settings.source import FILE_SETTINGS, PREFIX
from beatflow.settings.values import mask_url, parse_tokens, psycopg_url

__all__ = ["FILE_SETTINGS", "PREFIX", "Settings", "mask_url", "parse_tokens", "psycopg_url"]
