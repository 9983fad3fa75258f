"""Waits longer than a broker can hold a message: the countdown of one message is capped, and
a message that arrives before its work is due waits again (a sensor's next poke, a retry's
next try: ``worker/sensor.py``, ``worker/node.py``).

A worker holds a message with a countdown unacknowledged until it is due (``acks_late``).
RabbitMQ closes the channel of a delivery unacked past its ``consumer_timeout`` (1,800 s by
default; every unacked delivery on it is requeued, running tasks' included), and Redis gives a
message back past ``BEATFLOW_VISIBILITY_TIMEOUT`` while the first copy still waits. So no
countdown is longer than ``BEATFLOW_MAX_COUNTDOWN_SECONDS`` (900 s by default, half RabbitMQ's
default consumer_timeout) nor half the visibility timeout; a longer wait is made of several.

A retry's due time is read from its task run's row (``retry_due``): the jitter of its backoff
comes from the dedupe key and the try number, so every message for it (the retry itself, a
redelivered copy, the reconciler's re-send) finds the same due time, and the reconciler too."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from beatflow.states import TaskRunState

if TYPE_CHECKING:
    from beatflow.dag.model import RetryPolicy
    from beatflow.store import TaskRunRecord

# BEATFLOW_MAX_COUNTDOWN_SECONDS' default: half RabbitMQ's default consumer_timeout
COUNTDOWN_MAX_SECONDS = 900.0
# a message at most this early for its work still does it (clocks, the broker's ETA rounding)
EARLY_TOLERANCE_SECONDS = 0.5


def countdown(due: float, visibility_timeout: float, cap: float = COUNTDOWN_MAX_SECONDS) -> float:
    """The countdown of a message for work due in ``due`` seconds: never further out than half
    Redis's visibility timeout (a longer ETA would be redelivered while it waits) nor than
    ``cap`` (RabbitMQ's consumer_timeout); never negative (overdue: at once)."""
    return max(0.0, min(due, visibility_timeout / 2, cap))


def retry_jitter(dedupe_key: str, try_number: int) -> float:
    """The jitter in [0, 1) of the backoff after try ``try_number`` of ``dedupe_key``: spread
    across task runs like a random draw, but the same for every reader of the row."""
    digest = hashlib.blake2b(f"{dedupe_key}\0{try_number}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def retry_delay(policy: RetryPolicy, dedupe_key: str, round_try: int, try_number: int) -> float:
    """Seconds between the end of a failed try and the next one (``policy.delay_for`` with the
    task run's own jitter). ``round_try``: the try's number in its round (the policy counts from
    a clear or replay), ``try_number``: the row's."""
    return policy.delay_for(round_try, retry_jitter(dedupe_key, try_number))


def retry_due(record: TaskRunRecord, policy: RetryPolicy) -> datetime | None:
    """When the next try of an ``up_for_retry`` task run is due: its failed try's end plus its
    backoff. None when nothing holds it back (another state, a row put back by a replay: no
    try in its round yet, or no end recorded)."""
    if record.state != TaskRunState.UP_FOR_RETRY or record.ended_at is None:
        return None
    if record.tries_since_clear < 1:
        return None
    delay = retry_delay(policy, record.dedupe_key, record.tries_since_clear, record.try_number)
    return record.ended_at + timedelta(seconds=delay)


def early_by(due: datetime | None, now: datetime) -> float:
    """Seconds a message arriving at ``now`` is early for work due at ``due``; 0 when it is
    due (within EARLY_TOLERANCE_SECONDS) or nothing is due."""
    if due is None:
        return 0.0
    ahead = (due - now).total_seconds()
    return ahead if ahead > EARLY_TOLERANCE_SECONDS else 0.0
