"""After a task run's or a DAG run's state is committed: its ``on_<event>_callback``s. Plain
callables are called here, in process, each guarded (an exception is logged and counted, never
raised: the state is already recorded and stays as it is). Each notifier's event is written to
the outbox (``store.add_notification``, keyed by the event: a duplicated or redelivered event
writes nothing) and handed to ``beatflow.notify`` (``notify.deliver``), which sends it off the
task's path. Nothing here raises."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from beatflow.execution import canvas, events
from beatflow.notify.base import Notifier, event_key, make_context

if TYPE_CHECKING:
    from beatflow.dag.model import DAG, TaskSpec
    from beatflow.runtime import Runtime
    from beatflow.store import DagRunRecord

log = logging.getLogger(__name__)

NOTIFY_TASK = "beatflow.notify"
CALLBACK_EVENT = "beatflow-callback"  # a Celery event per callback outcome (the exporter counts)
# a task run's final or retry state -> the event its callbacks are named for
EVENT_OF_STATE = {
    "success": "success",
    "failed": "failure",
    "up_for_retry": "retry",
    "skipped": "skipped",
}


def task_event(
    runtime: Runtime,
    dag: DAG,
    spec: TaskSpec,
    run: DagRunRecord,
    *,
    state: str,
    map_index: int = -1,
    try_number: int | None = None,
    error: str | None = None,
    reason: str | None = None,
    dedupe_key: str | None = None,
) -> None:
    """A task run reached ``state`` (committed): run its callbacks for that event."""
    event = EVENT_OF_STATE.get(str(state))
    if event is None:
        return
    legacy = {"retry": spec.on_retry, "failure": spec.on_failure}.get(event)
    callbacks = spec.callbacks.get(event, ())
    if legacy is None and not callbacks:
        return
    context = make_context(
        event=event,
        dag_id=dag.dag_id,
        run_id=run.run_id,
        state=state,
        task_id=spec.task_id,
        map_index=map_index,
        try_number=try_number,
        exception=error,
        reason=reason,
        logical_date=run.logical_date,
        conf=run.conf,
        dedupe_key=dedupe_key,
    )
    if legacy is not None:  # the deprecated on_retry= / on_failure= keyword callbacks
        keywords = {"dag_id": dag.dag_id, "run_id": run.run_id, "task_id": spec.task_id}
        _call(legacy, context, {**keywords, "error": error})
    _run(runtime, context, callbacks, spec.queue)


def dag_event(runtime: Runtime, dag: DAG, record: DagRunRecord) -> None:
    """A DAG run ended in ``record.state`` (committed): the DAG's callbacks for it."""
    event = {"success": "success", "failed": "failure"}.get(str(record.state))
    if event is None:
        return
    legacy = dag.on_failure if event == "failure" else None
    callbacks = dag.callbacks.get(event, ())
    if legacy is None and not callbacks:
        return
    context = make_context(
        event=event,
        dag_id=dag.dag_id,
        run_id=record.run_id,
        state=record.state,
        logical_date=record.logical_date,
        conf=record.conf,
        reason=f"DAG run {record.state}",
    )
    if legacy is not None:  # the deprecated DAG(on_failure=...)
        _call(
            legacy, context, {"dag_id": dag.dag_id, "run_id": record.run_id, "state": record.state}
        )
    _run(runtime, context, callbacks, None)


def _run(
    runtime: Runtime,
    context: dict[str, Any],
    callbacks: Sequence[Callable[..., Any]],
    queue: str | None,
) -> None:
    for index, callback in enumerate(callbacks):
        if isinstance(callback, Notifier):
            enqueue(runtime, context, index, queue)
        else:
            _call(callback, context, None)


def _call(
    fn: Callable[..., Any], context: Mapping[str, Any], keywords: dict[str, Any] | None
) -> None:
    """Call a plain callback (with the context, or the deprecated ``keywords``); log and count
    what it raises, never raise."""
    try:
        with canvas.sending_canvas(False):  # user code: its publishes are plain Celery
            if keywords is None:
                fn(dict(context))
            else:
                fn(**keywords)
    except Exception:
        log.exception(
            "%s callback %r of %s raised; the state stays as recorded",
            context["event"],
            fn,
            context.get("task_id") or context["dag_id"],
            extra={"dag_id": context["dag_id"], "run_id": context["run_id"]},
        )
        events.send_event(
            CALLBACK_EVENT, dag_id=context["dag_id"], event=context["event"], outcome="error"
        )


def enqueue(runtime: Runtime, context: dict[str, Any], index: int, queue: str | None) -> bool:
    """Write the event of the ``index``-th callback (a notifier) to the outbox and send
    ``beatflow.notify`` for it; False when the event was there already (a duplicate) or could
    not be written. The reconciler writes a row that could not be written (final states only)
    and sends again a message that could not be sent (``notify.sweep``)."""
    key = event_key(context, index)
    payload = {"context": context, "index": index}
    try:
        added = runtime.store.add_notification(
            key,
            dag_id=context["dag_id"],
            run_id=context["run_id"],
            kind=context["event"],
            payload=payload,
        )
    except Exception:
        log.exception("could not record notification %s; the reconciler writes it later", key)
        return False
    if not added:
        log.info("notification %s exists already (a duplicate event): not sent again", key)
        return False
    send(runtime, key, queue)
    return True


def send(runtime: Runtime, key: str, queue: str | None = None) -> None:
    """Send ``beatflow.notify`` for the pending event ``key`` (the reconciler sends it again if
    this fails)."""
    options: dict[str, Any] = {"ignore_result": True}
    if queue:
        options["queue"] = queue
    try:
        with canvas.sending_canvas():  # no result subscription: beatflow's own message
            runtime.app.send_task(NOTIFY_TASK, args=(key,), **options)
    except Exception:
        log.exception("could not send %s for %s; the reconciler sends it", NOTIFY_TASK, key)
