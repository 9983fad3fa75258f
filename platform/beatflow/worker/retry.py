"""Retries through Celery: a message runs again later, or goes back to the broker when even the
retry cannot be published."""

from __future__ import annotations

import logging
import time
from typing import Any, NoReturn

from celery import Task as CeleryTask
from celery.exceptions import Reject

log = logging.getLogger(__name__)

# No sleep inside a worker slot lasts longer than this (in-process waits between write tries).
MAX_SLEEP_SECONDS = 1.0


def retry_later(
    task: CeleryTask,
    countdown: float,
    exc: BaseException | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
) -> NoReturn:
    """Retry this message through Celery in ``countdown`` seconds. When the retry cannot be
    published (the broker refuses: Celery raises Reject(requeue=False), which would drop the
    message), give the message back to the broker instead (requeue), after at most a second:
    it runs again and its task run's row (running, up_for_retry) tells it where it was.
    ``kwargs``: the message's keyword arguments for the retry (default: this message's)."""
    try:
        raise task.retry(countdown=countdown, exc=exc, kwargs=kwargs)
    except Reject as rejected:
        if rejected.requeue:
            raise
        log.warning(
            "could not publish the retry of %s (%s); giving the message back to the broker",
            task.name,
            rejected.reason,
        )
        time.sleep(min(MAX_SLEEP_SECONDS, max(0.0, countdown)))
        raise Reject(rejected.reason, requeue=True) from None
