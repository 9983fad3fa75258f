"""A DAG run's life: trigger (create the run record, check conf), dispatch (send its canvas,
respecting max_active_runs), follow (watch it to the end), close (final state, next queued run)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.canvas import Signature

from beatflow.dag.compile import compile_run
from beatflow.errors import BeatflowError, StoreUnavailableError
from beatflow.execution import events, rules
from beatflow.runtime import Runtime, runtime_of

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

FINISHED = frozenset({"success", "failed"})


def make_run_id(trigger: str, logical_date: datetime | None = None) -> str:
    """``scheduled__2026-11-29T10:00:00+00:00`` from a tick; ``manual__<now>`` otherwise."""
    when = logical_date or datetime.now(UTC)
    return f"{trigger}__{when.astimezone(UTC).isoformat(timespec='microseconds')}"


def trigger_dag(
    app: Celery,
    dag_id: str,
    *,
    conf: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    logical_date: datetime | None = None,
    trigger: str = "manual",
    leader_epoch: int | None = None,
) -> DagRunRecord:
    """Create a DAG run and send it to the workers; the same run id twice is one run.

    Raises DagNotFoundError for an unknown DAG and ConfError for a bad conf (nothing enqueued).
    """
    runtime = runtime_of(app)
    dag = runtime.dag(dag_id)
    resolved = dag.resolve_conf(conf)
    if run_id is not None and (not run_id or len(run_id) > 200 or "/" in run_id):
        raise BeatflowError(f"invalid run id {run_id!r}: 1-200 characters, no '/'")
    run_id = run_id or make_run_id(trigger if trigger != "scheduled" else "scheduled", logical_date)
    record, created = runtime.store.create_dag_run(
        dag_id,
        run_id,
        logical_date=logical_date or datetime.now(UTC),
        trigger=trigger,
        conf=resolved,
        leader_epoch=leader_epoch,
    )
    if not created:
        log.info("DAG run %s/%s exists already; not triggering it again", dag_id, run_id)
        return record
    log.info(
        "DAG run %s/%s created (%s)",
        dag_id,
        run_id,
        trigger,
        extra={"dag_id": dag_id, "run_id": run_id},
    )
    dispatch_waiting(runtime, dag_id)
    return runtime.store.get_dag_run(dag_id, run_id) or record


def send_canvas(app: Celery, canvas: Signature) -> None:
    """Send a DAG run's canvas without keeping result subscriptions.

    Celery's Redis backend subscribes the sender to the result channel of every group member it
    sends (for ``then`` callbacks). beatflow never waits on those results (task runs live in the
    results DB and node tasks store no Celery result), so in a long-lived sender — the beat, an
    API process — the subscriptions would only pile up (celery#3812): drop them at once.
    """
    consumer = getattr(app.backend, "result_consumer", None)
    before = set(getattr(consumer, "subscribed_to", ()))
    canvas.apply_async(ignore_result=True)
    if consumer is None:
        return
    prefix = app.backend.task_keyprefix
    prefix = prefix.decode() if isinstance(prefix, bytes) else str(prefix)
    for key in set(consumer.subscribed_to) - before:
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name.startswith(prefix):
            consumer.cancel_for(name[len(prefix) :])


def dispatch_waiting(runtime: Runtime, dag_id: str) -> int:
    """Send queued runs of ``dag_id``, oldest first, while max_active_runs allows."""
    dag = runtime.dag(dag_id)
    store = runtime.store
    running = len(store.list_dag_runs(dag_id, state="running", limit=dag.max_active_runs + 1))
    slots = dag.max_active_runs - running
    if slots <= 0:
        return 0
    queued = store.list_dag_runs(dag_id, state="queued", limit=1000)
    queued.sort(
        key=lambda r: (r.logical_date or r.queued_at or datetime.min.replace(tzinfo=UTC), r.run_id)
    )
    sent = 0
    for run in queued[:slots]:
        store.mark_dag_run_running(dag_id, run.run_id)
        send_canvas(runtime.app, compile_run(runtime.app, dag, run.run_id))
        sent += 1
    return sent


def close_run(runtime: Runtime, dag_id: str, run_id: str) -> str:
    """The canvas's last step: set the DAG run's final state, then start waiting runs."""
    store = runtime.store
    states = [t.state for t in store.get_task_runs(dag_id, run_id)]
    state = rules.dag_run_state(states)
    record = store.finish_dag_run(dag_id, run_id, state)
    log.info(
        "DAG run %s/%s finished: %s in %.3fs",
        dag_id,
        run_id,
        record.state,
        record.duration_seconds or 0.0,
        extra={"dag_id": dag_id, "run_id": run_id},
    )
    events.dag_run_finished(dag_id, record.state, record.duration_seconds)
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError:
        return record.state
    if record.state == "failed" and dag.on_failure is not None:
        try:
            dag.on_failure(dag_id=dag_id, run_id=run_id, state=record.state)
        except Exception:  # noqa: BLE001 - a user's callback must not change the outcome
            log.exception("on_failure callback of DAG %s raised", dag_id)
    dispatch_waiting(runtime, dag_id)
    return record.state


def follow_run(
    app: Celery,
    dag_id: str,
    run_id: str,
    *,
    on_task_change: Callable[[TaskRunRecord], None] | None = None,
    timeout: float = 3600.0,
    poll: float = 0.1,
) -> DagRunRecord:
    """Watch a DAG run until it finishes; call ``on_task_change`` on every task state change.

    Raises TimeoutError if it has not finished after ``timeout`` seconds.
    """
    store = runtime_of(app).store
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[str, int]] = {}
    while True:
        try:
            run = store.get_dag_run(dag_id, run_id)
            tasks = store.get_task_runs(dag_id, run_id) if run is not None else []
        except StoreUnavailableError as exc:
            # The run goes on without us: keep watching until the database is back.
            if time.monotonic() > deadline:
                raise TimeoutError(f"results database unavailable: {exc}") from exc
            log.warning(
                "results database unavailable while following %s/%s; retrying", dag_id, run_id
            )
            time.sleep(min(1.0, poll * 10))
            continue
        if run is None:
            raise BeatflowError(f"no DAG run {dag_id}/{run_id}")
        for t in tasks:
            marker = (t.state, t.try_number)
            if seen.get(t.dedupe_key) != marker:
                seen[t.dedupe_key] = marker
                if on_task_change is not None:
                    on_task_change(t)
        if run.state in FINISHED:
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"DAG run {dag_id}/{run_id} still {run.state} after {timeout}s")
        time.sleep(poll)
