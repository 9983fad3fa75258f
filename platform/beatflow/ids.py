"""The identifiers that become Redis keys, metric labels, Celery task names, file names and SQL
values: DAG ids, task ids and run ids, each held to a safe ASCII character set and a length."""

from __future__ import annotations

import re

from beatflow.errors import InvalidIdError

MAX_ID_LENGTH = 200
# A DAG id and a task id: letters, digits, '_' and '-'. No '.', so `<dag_id>.<task_id>` (the
# Celery task name) splits one way only; no '/', so `<dag_id>/<run_id>/<task_id>` (the default
# dedupe key) does too.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
# A task id may also be dotted: a task group prefixes its tasks' ids (``extract.load``). The
# Celery name still splits one way: at the first '.', the end of the DAG id.
_TASK_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_\-]*)*")
# A run id may also carry a timestamp: ':', '+' and '.' (``manual__2026-11-30T20:47:05+00:00``).
_RUN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.:+]*")
RESERVED_RUN_PREFIXES = ("scheduled__", "catchup__", "backfill__")


def split_task_name(name: str) -> tuple[str, str] | None:
    """``"<dag_id>.<task_id>"`` (a DAG task's Celery name) -> (dag_id, task_id); None for any
    other name (a plain task's ``package.module.function``)."""
    dag_id, dot, task_id = name.partition(".")
    if not dot or len(name) > 2 * MAX_ID_LENGTH + 1:
        return None
    if not (_NAME_RE.fullmatch(dag_id) and _TASK_RE.fullmatch(task_id)):
        return None
    return dag_id, task_id


def _check(kind: str, value: object, pattern: re.Pattern[str], allowed: str) -> str:
    if not isinstance(value, str):
        raise InvalidIdError(kind, repr(value), f"must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(kind, value, f"must be 1 to {MAX_ID_LENGTH} characters long")
    if not pattern.fullmatch(value):
        raise InvalidIdError(kind, value, f"use only {allowed}")
    return value


def check_dag_id(value: object) -> str:
    """Return ``value`` if it is a valid DAG id; raise InvalidIdError saying why not."""
    return _check("DAG id", value, _NAME_RE, "ASCII letters, digits, '_' and '-'")


def check_task_id(value: object) -> str:
    """Return ``value`` if it is a valid task id; raise InvalidIdError saying why not."""
    return _check(
        "task id", value, _TASK_RE, "ASCII letters, digits, '_' and '-' (and '.' between parts)"
    )


def check_run_id(value: object, *, manual: bool = False) -> str:
    """Return ``value`` if it is a valid run id; a manual run id may not take a prefix that
    scheduled runs use (``scheduled__`` and the like), or it could block a tick's run."""
    run_id = _check("run id", value, _RUN_RE, "ASCII letters, digits, '_', '-', '.', ':' and '+'")
    if manual and run_id.startswith(RESERVED_RUN_PREFIXES):
        raise InvalidIdError(
            "run id", run_id, f"the prefixes {', '.join(RESERVED_RUN_PREFIXES)} are the beat's"
        )
    return run_id
