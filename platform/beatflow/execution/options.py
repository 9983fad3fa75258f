"""The options every Celery task beatflow registers shares, and the delay for retrying while
the results database is unreachable. One place, so a new task cannot forget one of them."""

from __future__ import annotations

import random
from typing import Any

from celery.utils.time import get_exponential_backoff_interval

TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    # Results live in the results DB: the Celery backend only counts chord parts.
    "ignore_result": True,
    # Registered on one app only: tests and tools build several apps in one process.
    "shared": False,
    # Tries are counted in the results DB (the task's own retries, waits for a lease or the
    # database): Celery must not cap them.
    "max_retries": None,
    # What such a task publishes is beatflow canvas: no result subscriptions (execution.canvas).
    "beatflow_canvas": True,
}

STORE_RETRY_MAX_DELAY = 30.0


def store_retry_delay(retries: int) -> float:
    """Seconds before retrying a task whose results DB (or broker) was unreachable: Celery's own
    exponential backoff (``retry_backoff``) with full jitter, capped, never under 0.5 s."""
    delay = get_exponential_backoff_interval(
        factor=1, retries=retries, maximum=int(STORE_RETRY_MAX_DELAY), full_jitter=True
    )
    return max(0.5, float(delay) + random.random() / 2)
