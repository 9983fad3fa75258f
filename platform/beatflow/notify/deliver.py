"""``beatflow.notify``: the Celery task that sends one notifier's event, and the reconciler's
re-send of events whose message was lost.

Why a Celery task and an outbox row, not a thread in the worker: the send must neither hold the
task's slot (a slow SMTP server, a webhook that times out) nor be lost with the process. The row
is written once the state it tells of is committed; the message is the wake-up. A delivery first
claims the row (``pending`` -> ``sending``, one winner), then sends with retries (tenacity), then
records ``sent`` or ``failed``. A duplicated or redelivered message finds the row taken and
sends nothing; a worker killed mid-send leaves it ``sending``, which nothing sends again: at most
once, by construction. A message lost before it ran (broker restart, worker SIGKILLed between
the row and the publish) leaves the row ``pending``, and the reconciler sends it again; one
killed between the state's commit and the row leaves no row, and the reconciler writes it
(``notify.sweep``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import tenacity
from celery import Celery
from celery import Task as CeleryTask

from beatflow.errors import BeatflowError, StoreUnavailableError
from beatflow.execution import events
from beatflow.execution.options import STORE_RETRY_MAX_DELAY, TASK_OPTIONS
from beatflow.notify.base import Notifier
from beatflow.notify.callbacks import CALLBACK_EVENT, NOTIFY_TASK
from beatflow.runtime import runtime_of

if TYPE_CHECKING:
    from beatflow.runtime import Runtime

log = logging.getLogger(__name__)


def notifier_for(runtime: Runtime, payload: dict[str, Any]) -> Notifier | None:
    """The notifier an event names (its DAG, task, event and place in the callback list), as
    the dags folder loaded here defines it; None when it is gone (the DAG changed)."""
    context = payload.get("context") or {}
    try:
        dag = runtime.dag(str(context.get("dag_id")))
    except BeatflowError:
        return None
    task_id = context.get("task_id")
    if task_id:
        spec = dag.tasks.get(str(task_id))
        callbacks = spec.callbacks if spec is not None else {}
    else:
        callbacks = dag.callbacks
    found = callbacks.get(str(context.get("event")), ())
    index = payload.get("index")
    if not isinstance(index, int) or not 0 <= index < len(found):
        return None
    notifier = found[index]
    return notifier if isinstance(notifier, Notifier) else None


def deliver(runtime: Runtime, key: str) -> str:
    """Claim the event ``key`` and send it; ``sent``, ``failed`` or ``duplicate`` (not pending:
    another delivery took it). Raises only StoreUnavailableError (Celery retries)."""
    payload = runtime.store.take_notification(key)
    if payload is None:
        log.info("notification %s is not pending (sent or being sent): nothing to do", key)
        return _counted(key, "duplicate")
    context = dict(payload.get("context") or {})
    notifier = notifier_for(runtime, payload)
    if notifier is None:
        error = "its notifier is no longer in the DAG (the DAG changed)"
        runtime.store.end_notification(key, state="failed", tries=0, error=error)
        log.warning("notification %s not sent: %s", key, error)
        return _counted(key, "failed", context)
    tries = 0
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(notifier.tries),
        wait=tenacity.wait_exponential_jitter(initial=0.5, max=notifier.max_wait),
        before_sleep=lambda rs: log.warning(
            "notification %s: %r failed (try %d: %s); trying again",
            key,
            notifier,
            rs.attempt_number,
            rs.outcome.exception() if rs.outcome else "no outcome",
        ),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                tries += 1
                notifier.notify(context)
    except Exception as exc:  # noqa: BLE001 - a user's notifier: anything may go wrong
        error = f"{type(exc).__name__}: {exc}"
        runtime.store.end_notification(key, state="failed", tries=tries, error=error)
        log.error("notification %s: %r failed after %d tries: %s", key, notifier, tries, error)
        return _counted(key, "failed", context)
    runtime.store.end_notification(key, state="sent", tries=tries)
    log.info("notification %s sent by %r (try %d)", key, notifier, tries)
    return _counted(key, "sent", context)


def _counted(key: str, outcome: str, context: dict[str, Any] | None = None) -> str:
    dag_id = (context or {}).get("dag_id") or key.split("/", 1)[0]
    event = (context or {}).get("event") or ""
    events.send_event(CALLBACK_EVENT, dag_id=dag_id, event=event, outcome=outcome)
    return outcome


def register(app: Celery) -> None:
    """Register ``beatflow.notify`` on ``app``; while the results database is unreachable Celery
    retries it with exponential backoff and full jitter."""

    @app.task(  # type: ignore[untyped-decorator]
        name=NOTIFY_TASK,
        **TASK_OPTIONS,
        autoretry_for=(StoreUnavailableError,),
        retry_backoff=True,
        retry_backoff_max=int(STORE_RETRY_MAX_DELAY),
        retry_jitter=True,
    )
    def notify(self: CeleryTask, key: str) -> str:
        return deliver(runtime_of(self.app), key)
