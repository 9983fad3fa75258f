"""Pooled claims: a task with ``pool=`` claims its dedupe key and its pool's slots in one
transaction (``store/pools.py``). A task whose slots do not fit does not hold a worker slot
while it waits: its message is retried by Celery after a short, growing countdown (at most
``POOL_WAIT_MAX_SECONDS``, far below any visibility timeout), and its wait is recorded in the
results database (``queued`` in ``beatflow pools list``, the API, the UI and ``runs show``).

As in Airflow, a task whose pool does not exist fails (with the reason, and a dead letter that
``beatflow dlq replay`` runs again once the pool is created). Tasks without a pool never come
here: their claim is the plain one, with no extra statement."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from celery import Task as CeleryTask

from beatflow.dag.model import DAG, TaskSpec
from beatflow.store import Claim, Store
from beatflow.worker import claim
from beatflow.worker.retry import retry_later

log = logging.getLogger(__name__)

POOL_WAIT_FIRST_SECONDS = 0.5
POOL_WAIT_MAX_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class RefusedClaim(Claim):
    """A claim made only to fail the task run: ``reason`` says why (its pool does not exist)."""

    reason: str = ""


def claim_key(
    store: Store, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, index: int, key: str
) -> Claim:
    """Claim ``key`` (and its pool's slots when the task has a pool); a task whose slots do not
    fit is retried later (this raises Celery's Retry)."""
    if spec.pool is None:
        return claim.claim_key(store, task, dag, spec, run_id, index, key)
    got = store.claim_pooled(
        key, pool=spec.pool, slots=spec.pool_slots, dag_id=dag.dag_id, run_id=run_id,
        task_id=spec.task_id, map_index=index, worker=task.request.hostname,
        celery_task_id=task.request.id,
    )  # fmt: skip
    if got.wait == "missing" and got.claim is not None:
        reason = f"pool {spec.pool!r} does not exist (create it: beatflow pools set {spec.pool} N)"
        c = got.claim
        return RefusedClaim(c.outcome, c.record, c.token, reason=reason)
    if got.claim is None:
        delay = wait_seconds(task.request.retries or 0)
        log.info("task %s waits for %d slot(s) of pool %r (%d of %d used); retrying in %.1fs",
                 spec.task_id, spec.pool_slots, spec.pool, got.used, got.slots, delay)  # fmt: skip
        retry_later(task, delay)
    assert got.claim is not None
    return got.claim


def refusal(got: Claim) -> str | None:
    """Why the claim ``got`` must fail its task run without running it, or None."""
    return got.reason if isinstance(got, RefusedClaim) else None


def wait_seconds(waits: int) -> float:
    """The countdown of a task's next try for its pool's slots: growing, capped, jittered."""
    base = min(POOL_WAIT_MAX_SECONDS, POOL_WAIT_FIRST_SECONDS * float(2 ** min(waits, 8)))
    jitter: float = random.random()
    return base / 2 + jitter * base / 2
