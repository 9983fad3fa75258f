"""A task's options: the names ``@task(...)``, ``.override()``, ``default_args`` and a task
group's ``default_args`` take, and the checks of their values (types and ranges, each problem
said with its value), shared by the authoring API, task groups, branches and sensors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from beatflow.dag import model
from beatflow.dag.assets import outlet_names

TASK_OPTIONS = {
    "retries",
    "retry_delay",
    "retry_backoff",
    "retry_max_delay",
    "retry_jitter",
    "soft_time_limit",
    "time_limit",
    "queue",
    "priority",
    "pool",
    "pool_slots",
    "trigger_rule",
    "dedupe_key",
    "on_retry",
    "on_failure",
    *(f"on_{event}_callback" for event in model.CALLBACK_EVENTS),
    "outlets",
}


_QUEUE_RE = re.compile(r"[A-Za-z0-9_.\-]+")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | timedelta) and not isinstance(value, bool)


def option_problems(opts: Mapping[str, Any]) -> list[str]:
    """What is wrong with a task's options (types and ranges), each said with its value."""
    problems: list[str] = []
    retries = opts.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        problems.append(f"retries must be an integer of 0 or more, got {retries!r:.40}")
    defaults = {"retry_delay": 1.0, "retry_max_delay": 300.0}
    for name in ("retry_delay", "retry_max_delay", "soft_time_limit", "time_limit"):
        value = opts.get(name, defaults.get(name))
        if value is None and name in ("soft_time_limit", "time_limit"):
            continue
        if value is None or not _is_number(value) or seconds(value) < 0:
            problems.append(f"{name} must be seconds (number or timedelta) >= 0, got {value!r:.40}")
    backoff = opts.get("retry_backoff", 2.0)
    if not _is_number(backoff) or isinstance(backoff, timedelta) or backoff < 1:
        problems.append(f"retry_backoff must be a number of 1 or more, got {backoff!r:.40}")
    priority = opts.get("priority")
    if priority is not None and (
        not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 9
    ):
        problems.append(f"priority must be an integer from 0 to 9, got {priority!r:.40}")
    queue = opts.get("queue")
    if queue is not None and (not isinstance(queue, str) or not _QUEUE_RE.fullmatch(queue)):
        problems.append(f"queue must be letters, digits, '_', '.' and '-', got {queue!r:.40}")
    try:
        outlet_names(opts.get("outlets"))
    except ValueError as exc:
        problems.append(str(exc))
    pool, slots = opts.get("pool"), opts.get("pool_slots", 1)
    if pool is not None and (not isinstance(pool, str) or not _QUEUE_RE.fullmatch(pool)):
        problems.append(f"pool must be letters, digits, '_', '.' and '-', got {pool!r:.40}")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        problems.append(f"pool_slots must be an integer of 1 or more, got {slots!r:.40}")
    return problems


def callbacks_of(opts: Mapping[str, Any]) -> dict[str, tuple[Callable[..., Any], ...]] | str:
    """The ``on_<event>_callback`` options as event -> callables, or what is wrong with one."""
    out: dict[str, tuple[Callable[..., Any], ...]] = {}
    for event in model.CALLBACK_EVENTS:
        name = f"on_{event}_callback"
        if name not in opts:
            continue
        found = model.callback_list(opts[name])
        if found is None:
            return (
                f"{name} must be a callable, a notifier or a list of them, got {opts[name]!r:.40}"
            )
        if found:
            out[event] = found
    return out


def seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
