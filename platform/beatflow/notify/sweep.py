"""The reconciler's part in notifications: events never lost for good.

Two gaps are closed here, both safe to run anywhere, any number of times, concurrently:

- an event whose outbox row is ``pending`` long after it was written lost its
  ``beatflow.notify`` message (a broker restart, a worker killed between the row and the
  publish): the message is sent again (``resend_pending``);
- an event with no outbox row at all (the worker was SIGKILLed between the state's commit and
  the row): the runs that ended recently are read with their task runs, each final state a
  notifier is named for gives its event key, and the keys the outbox lacks are written and sent
  (``enqueue_missing``; the insert-or-nothing makes a race with the worker's own write harmless).
  Retries are transient (the row moves on to the next try): a lost retry event is not found.

Plain callables are not called from here: they run once, in the process that recorded the state."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from beatflow.notify.base import Notifier, event_key, make_context
from beatflow.notify.callbacks import EVENT_OF_STATE, enqueue, send
from beatflow.times import utc_now

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.runtime import Runtime
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

# an event still pending (or missing) this long after its state was written lost its message
RESEND_AFTER = timedelta(seconds=60)
# how far back the runs whose events are checked ended
SWEEP_WINDOW = timedelta(minutes=10)
Event = tuple[dict[str, Any], int, str | None]  # context, notifier index, queue


def resend_pending(runtime: Runtime, limit: int = 100) -> int:
    """Send ``beatflow.notify`` again for events pending longer than ``RESEND_AFTER``; the claim
    keeps a late original from sending twice. Returns how many."""
    keys = runtime.store.pending_notifications(utc_now() - RESEND_AFTER, limit)
    for key in keys:
        send(runtime, key)
    if keys:
        log.warning("sent %d pending notifications again (their messages were lost)", len(keys))
    return len(keys)


def enqueue_missing(runtime: Runtime, limit: int = 100) -> int:
    """Write and send the notifier events of runs that ended in the last ``SWEEP_WINDOW`` (but
    before ``RESEND_AFTER``) that the outbox lacks. Returns how many."""
    dags = {d.dag_id: d for d in runtime.dagbag.dags.values() if _has_notifiers(d)}
    if not dags:
        return 0
    now = utc_now()
    store = runtime.store
    runs = store.dag_runs_ended_between(
        list(dags), now - SWEEP_WINDOW, now - RESEND_AFTER, limit=limit
    )
    events: dict[str, Event] = {}
    for dag_id in {r.dag_id for r in runs}:
        dag = dags[dag_id]
        mine = {r.run_id: r for r in runs if r.dag_id == dag_id}
        rows = store.task_runs_of(dag_id, list(mine))
        for run in mine.values():
            events.update(_keyed(dag_events(dag, run)))
        for row in rows:
            if row.run_id in mine:
                events.update(_keyed(task_events(dag, mine[row.run_id], row)))
    missing = set(events) - store.existing_notifications(list(events))
    for key in sorted(missing):
        context, index, queue = events[key]
        enqueue(runtime, context, index, queue)
    if missing:
        log.warning("wrote %d notifications their workers did not (lost at a kill)", len(missing))
    return len(missing)


def _has_notifiers(dag: DAG) -> bool:
    specs = [dag.callbacks, *(spec.callbacks for spec in dag.tasks.values())]
    return any(isinstance(c, Notifier) for found in specs for cs in found.values() for c in cs)


def _keyed(events: Iterable[Event]) -> dict[str, Event]:
    return {event_key(context, index): (context, index, queue) for context, index, queue in events}


def _notifiers(found: Iterable[Any]) -> list[int]:
    return [i for i, c in enumerate(found) if isinstance(c, Notifier)]


def dag_events(dag: DAG, run: DagRunRecord) -> list[Event]:
    """The notifier events of a run's end, as ``callbacks.dag_event`` made them."""
    event = {"success": "success", "failed": "failure"}.get(str(run.state))
    if event is None:
        return []
    context = make_context(
        event=event, dag_id=dag.dag_id, run_id=run.run_id, state=run.state,
        logical_date=run.logical_date, conf=run.conf, reason=f"DAG run {run.state}",
    )  # fmt: skip
    return [(context, i, None) for i in _notifiers(dag.callbacks.get(event, ()))]


def task_events(dag: DAG, run: DagRunRecord, row: TaskRunRecord) -> list[Event]:
    """The notifier events of a final task run (success, failed, skipped), as the worker made
    them (``Attempt.notify``, a skip's ``callbacks.task_event``)."""
    event = EVENT_OF_STATE.get(str(row.state))
    spec = dag.tasks.get(row.task_id)
    if event is None or event == "retry" or spec is None:
        return []
    if spec.map_over is not None and row.map_index < 0:
        return []  # a .map() expansion's own row: its instances tell their events
    found = _notifiers(spec.callbacks.get(event, ()))
    if not found:
        return []
    context = make_context(
        event=event, dag_id=dag.dag_id, run_id=run.run_id, state=row.state,
        task_id=row.task_id, map_index=row.map_index,
        try_number=None if event == "skipped" else row.try_number,
        exception=row.error if event == "failure" else None,
        logical_date=run.logical_date, conf=run.conf, dedupe_key=row.dedupe_key,
    )  # fmt: skip
    return [(context, i, spec.queue) for i in found]
