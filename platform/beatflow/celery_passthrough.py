"""Celery settings users may set (``BEATFLOW_CELERY_<SETTING>``, JSON values), the ones beatflow
refuses because its guarantees rest on them, and masking of every URL's password wherever Celery
shows its configuration (``celery inspect conf``, Flower's Config tab and /api/workers).

Imports nothing of ours: beatflow.settings builds Settings.celery_overrides with :func:`parse`."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

CELERY_PREFIX = "BEATFLOW_CELERY_"

_DELIVERY = (
    "beatflow runs every task with acks_late and reject_on_worker_lost, so a lost worker's "
    "message is redelivered and its task run taken over; make the task idempotent instead"
)
_VISIBILITY = (
    "set BEATFLOW_VISIBILITY_TIMEOUT: beatflow keeps the broker's and the result backend's "
    "visibility timeouts equal and above the task time limit, or Redis redelivers tasks that "
    "are still running"
)
_JSON = "beatflow accepts JSON only: pickle (or yaml, msgpack) would let a message run code"

# setting -> why it cannot be passed through (and what to set instead)
REFUSED: dict[str, str] = {
    "task_serializer": _JSON,
    "result_serializer": _JSON,
    "event_serializer": _JSON,
    "accept_content": _JSON,
    "result_accept_content": _JSON,
    "task_acks_late": _DELIVERY,
    "task_reject_on_worker_lost": _DELIVERY,
    "task_acks_on_failure_or_timeout": _DELIVERY,
    "broker_transport_options": _VISIBILITY,
    "result_backend_transport_options": _VISIBILITY,
    "visibility_timeout": _VISIBILITY,
    "task_time_limit": "set BEATFLOW_TASK_TIME_LIMIT (checked against the visibility timeout)",
    "task_soft_time_limit": "set BEATFLOW_TASK_SOFT_TIME_LIMIT",
    "broker_url": "set BEATFLOW_BROKER_URL",
    "broker_read_url": "set BEATFLOW_BROKER_URL",
    "broker_write_url": "set BEATFLOW_BROKER_URL",
    "result_backend": (
        "set BEATFLOW_RESULT_BACKEND_URL: chords need beatflow's Redis result backend"
    ),
    "task_always_eager": "tasks would run inside the caller, with no broker, retries or leases",
    "task_ignore_result": "beatflow's chords count their parts in the result backend",
    "timezone": "beatflow schedules in UTC instants; give each DAG its timezone instead",
    "enable_utc": "beatflow schedules in UTC instants; give each DAG its timezone instead",
    "beat_scheduler": "the beat is beatflow's (RedBeat with leader fencing)",
    "worker_hijack_root_logger": "set BEATFLOW_LOG_FORMAT / BEATFLOW_LOG_LEVEL",
    "imports": "set BEATFLOW_IMPORTS",
    "include": "set BEATFLOW_IMPORTS",
}


def celery_setting_names() -> frozenset[str]:
    from celery.app.defaults import DEFAULTS, flatten

    return frozenset(name for name, _ in flatten(DEFAULTS))


def parse(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """``BEATFLOW_CELERY_*`` variables -> ({celery_setting: value}, problems). A value is
    JSON (``10``, ``true``, ``{"a": 1}``, ``"x"``); one that is not JSON is taken as a string."""
    overrides: dict[str, Any] = {}
    problems: list[str] = []
    for var in sorted(k for k in env if k.startswith(CELERY_PREFIX)):
        raw = env[var]
        name = var[len(CELERY_PREFIX) :].lower()
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        overrides[name] = value
        problems.extend(f"{var}: {p}" for p in check(name, value))
    return overrides, problems


def check(name: str, value: Any) -> list[str]:
    """What is wrong with passing Celery setting ``name`` through (empty: nothing)."""
    if name.startswith("redbeat_") or name.startswith("beatflow"):
        return ["the beat's settings are beatflow's (BEATFLOW_BEAT_*, BEATFLOW_REDBEAT_URL)"]
    if name in REFUSED:
        return [f"{name} cannot be changed: {REFUSED[name]}"]
    known = celery_setting_names()
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f'; did you mean "{CELERY_PREFIX}{close[0].upper()}"?' if close else ""
        return [f"{name} is not a Celery setting{hint}"]
    return []


def apply(config: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (beatflow's derived Celery settings) with the user's overrides on top."""
    return {**config, **overrides}


# ------------------------------------------------------------------ masking what Celery shows

_installed = False


def install_config_masking(mask_url: Callable[[str], str]) -> None:
    """Wrap Celery's config filter (used by ``inspect conf``, so by Flower too) so that every
    string holding a URL has its password masked, whatever the setting is called (Celery
    masks broker_url and *backend* only: redbeat_redis_url showed its password)."""
    global _installed
    if _installed:
        return
    from celery.app import utils

    original = utils.filter_hidden_settings

    def filter_hidden_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
        return {k: _mask(v, mask_url) for k, v in original(conf).items()}

    utils.filter_hidden_settings = filter_hidden_settings
    _installed = True


_URL_RE = re.compile(r"[a-z][a-z0-9+.\-]*://", re.IGNORECASE)


def _mask(value: Any, mask_url: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask_url(value) if _URL_RE.search(value) else value
    if isinstance(value, Mapping):
        return {k: _mask(v, mask_url) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_mask(v, mask_url) for v in value)
    return value
