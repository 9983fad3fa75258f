"""Following Celery's event stream: ``EventHandler`` turns one event (a dict) into metric
updates — celery-exporter's task counters, runtime histogram and worker gauges, plus beatflow's
task-run outcomes (a node's task-succeeded event carries its own) and its duplicate-delivery and
DAG-run events — and ``EventFollower`` keeps a receiver connected to the broker, reconnecting
with backoff when Redis blips."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import tenacity
from celery import Celery

from beatflow.execution import events as beatflow_events
from beatflow.ids import split_task_name
from beatflow.observability.metrics import Metrics
from beatflow.states import DagRunState, TaskRunState

log = logging.getLogger(__name__)

TERMINAL = frozenset({"task-succeeded", "task-failed", "task-rejected", "task-revoked"})
HELD = frozenset({"task-received", "task-started"})
# The series created at zero for every DAG and task (the first increase must be visible); the
# others appear when first counted.
ZERO_TASK_RUN_STATES = (TaskRunState.SUCCESS, TaskRunState.UP_FOR_RETRY, TaskRunState.FAILED)
ZERO_DAG_RUN_STATES = (DagRunState.SUCCESS, DagRunState.FAILED)
_EXCEPTION_RE = re.compile(r"^\s*([\w.]+)\s*\(")


def exception_name(text: Any) -> str:
    """``"ValueError('boom')"`` -> ``"ValueError"`` (the failed counter's bounded label)."""
    match = _EXCEPTION_RE.match(str(text or ""))
    return match.group(1).rsplit(".", 1)[-1] if match else "UnknownException"


@dataclass(slots=True)
class _TaskInfo:
    name: str
    queue: str
    worker: str = ""  # set while a worker holds the message (received, not finished)


@dataclass(slots=True)
class _Worker:
    last_seen: float
    freq: float


class EventHandler:
    """Updates ``metrics`` from Celery events; thread-safe enough for one receiver thread plus
    a sweeper (each metric object locks itself)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        default_queue: str = "celery",
        worker_timeout: float = 10.0,
        max_tracked_tasks: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.metrics = metrics
        self._grouped: dict[str, set[str]] = {}  # dag_id -> its dotted (grouped) task ids
        self.default_queue = default_queue
        self.worker_timeout = worker_timeout
        self.max_tracked_tasks = max_tracked_tasks
        self.clock = clock
        self._tasks: OrderedDict[str, _TaskInfo] = OrderedDict()
        self._workers: dict[str, _Worker] = {}
        self._task_series: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ setup

    def know_dags(self, dags: Iterable[tuple[str, Iterable[str]]]) -> None:
        """Create the zero series of every DAG's counters, so the first increase is visible."""
        m = self.metrics
        for dag_id, task_ids in dags:
            task_ids = list(task_ids)
            # a task group's dotted ids: "proj.tasks.add" is a plain task unless a DAG has it
            self._grouped[dag_id] = {t for t in task_ids if "." in t}
            for run_state in ZERO_DAG_RUN_STATES:
                m.dag_runs.labels(dag=dag_id, state=run_state)
            m.sla_misses.labels(dag=dag_id)
            for task_id in task_ids:
                for task_state in ZERO_TASK_RUN_STATES:
                    m.task_runs.labels(dag=dag_id, task=task_id, state=task_state)

    # ------------------------------------------------------------------ events

    def handle(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("type", ""))
        m = self.metrics
        m.events_seen.inc()
        sent_at = event.get("timestamp")
        if isinstance(sent_at, int | float):
            m.event_lag.set(max(0.0, self.clock() - float(sent_at)))
        if kind.startswith("task-"):
            self._task_event(kind, event)
        elif kind.startswith("worker-"):
            self._worker_event(kind, event)
        elif kind == beatflow_events.TASK_RUN_FINISHED:
            m.task_runs.labels(
                dag=_s(event.get("dag_id")),
                task=_s(event.get("task_id")),
                state=_s(event.get("state")),
            ).inc()
        elif kind == beatflow_events.DUPLICATE_DELIVERY:
            m.duplicate_deliveries.labels(
                dag=_s(event.get("dag_id")), task=_s(event.get("task_id"))
            ).inc()
        elif kind == "beatflow-reconciler":  # beatflow.runs.reconciler.EVENT
            m.reconciler_actions.labels(
                dag=_s(event.get("dag_id")), action=_s(event.get("action"))
            ).inc()
        elif kind == "beatflow-callback":  # beatflow.notify.callbacks.CALLBACK_EVENT
            m.callbacks.labels(
                dag=_s(event.get("dag_id")),
                event=_s(event.get("event")),
                outcome=_s(event.get("outcome")),
            ).inc()
        elif kind == beatflow_events.DAG_RUN_FINISHED:
            self._dag_run_finished(
                _s(event.get("dag_id")), _s(event.get("state")), event.get("duration")
            )

    def _task_event(self, kind: str, event: Mapping[str, Any]) -> None:
        counter = self.metrics.task_events.get(kind)
        if counter is None:
            return
        uuid = str(event.get("uuid", ""))
        info = self._track(kind, uuid, event)
        hostname = _s(event.get("hostname"))
        labels = {"name": info.name, "hostname": hostname, "queue_name": info.queue}
        self._ensure_series(labels)
        if kind == "task-failed":
            counter.labels(exception=exception_name(event.get("exception")), **labels).inc()
        else:
            counter.labels(**labels).inc()
        if kind == "task-succeeded":
            runtime = event.get("runtime")
            if isinstance(runtime, int | float):
                self.metrics.task_runtime.labels(**labels).observe(float(runtime))
            self._task_run_outcome(info.name, event.get("result"))

    def _task_run_outcome(self, name: str, result: Any) -> None:
        """A node task's task-succeeded event carries its task run's outcome as its result
        (``execution.events.outcome``): count it under the DAG and task its name is made of."""
        parsed = beatflow_events.parse_outcome(result)
        node = split_task_name(name)
        if parsed is None or node is None:
            return
        dag, task = node
        if "." in task and task not in self._grouped.get(dag, ()):
            return  # a plain task's package.module.function, not a grouped DAG task
        if parsed.duplicate:
            self.metrics.duplicate_deliveries.labels(dag=dag, task=task).inc()
        else:
            self.metrics.task_runs.labels(dag=dag, task=task, state=parsed.state).inc()
        if parsed.dag_run is not None:  # this task closed its run
            self._dag_run_finished(dag, parsed.dag_run, parsed.dag_run_seconds)

    def _dag_run_finished(self, dag: str, state: str, duration: Any) -> None:
        self.metrics.dag_runs.labels(dag=dag, state=state).inc()
        if isinstance(duration, int | float) and duration >= 0:
            self.metrics.dag_run_duration.labels(dag=dag).observe(float(duration))

    def _track(self, kind: str, uuid: str, event: Mapping[str, Any]) -> _TaskInfo:
        with self._lock:
            info = self._tasks.get(uuid)
            name = event.get("name")
            if info is None:
                info = _TaskInfo(name=_s(name or "unknown"), queue=self.default_queue)
                if uuid:
                    self._tasks[uuid] = info
                    if len(self._tasks) > self.max_tracked_tasks:
                        self._tasks.popitem(last=False)
            elif name:
                info.name = str(name)
            queue = event.get("queue") or event.get("routing_key")
            if kind == "task-sent" and queue:
                info.queue = str(queue)
            if kind in HELD:
                info.worker = _s(event.get("hostname"))
            elif kind == "task-retried":  # the retry is a new message, waiting in the queue
                info.worker = ""
            if kind in TERMINAL:
                self._tasks.pop(uuid, None)
            return info

    def _ensure_series(self, labels: dict[str, str]) -> None:
        # The failure and retry counters of a (name, hostname, queue) start at 0 so a first
        # failure shows as an increase; celery-exporter zeroes all seven, but at 1,000 DAGs the
        # other five are 15,000 always-zero samples per scrape.
        key = (labels["name"], labels["hostname"], labels["queue_name"])
        if key in self._task_series:
            return
        self._task_series.add(key)
        self.metrics.task_events["task-failed"].labels(exception="", **labels)
        self.metrics.task_events["task-retried"].labels(**labels)

    def in_flight(self) -> dict[str, int]:
        """Messages held by live workers (received or running, not finished), by queue: the
        part of the backlog a broker without kombu's unacked hash (RabbitMQ over AMQP) cannot
        report. A worker that goes offline or silent releases its messages (the broker
        redelivers them, and they count as waiting again)."""
        out: dict[str, int] = {}
        with self._lock:
            for info in self._tasks.values():
                if info.worker:
                    out[info.queue] = out.get(info.queue, 0) + 1
        return out

    def _release(self, hostnames: Iterable[str]) -> None:
        gone = set(hostnames)
        for info in self._tasks.values():
            if info.worker in gone:
                info.worker = ""

    def _worker_event(self, kind: str, event: Mapping[str, Any]) -> None:
        hostname = _s(event.get("hostname"))
        m = self.metrics
        if kind == "worker-offline":
            with self._lock:
                self._workers.pop(hostname, None)
                self._release((hostname,))
            m.worker_up.labels(hostname=hostname).set(0)
            m.worker_tasks_active.labels(hostname=hostname).set(0)
            return
        freq = event.get("freq")
        with self._lock:
            self._workers[hostname] = _Worker(
                last_seen=self.clock(), freq=float(freq) if isinstance(freq, int | float) else 2.0
            )
        m.worker_up.labels(hostname=hostname).set(1)
        active = event.get("active")
        if isinstance(active, int):
            m.worker_tasks_active.labels(hostname=hostname).set(active)

    def sweep_workers(self) -> list[str]:
        """Mark workers silent for longer than the timeout as down; return their names."""
        now = self.clock()
        with self._lock:
            gone = [
                name
                for name, w in self._workers.items()
                if now - w.last_seen > max(self.worker_timeout, 3 * w.freq)
            ]
            for name in gone:
                del self._workers[name]
            self._release(gone)
        for name in gone:
            log.warning(
                "worker %s sent no heartbeat for %.0fs; marking it down",
                name,
                self.worker_timeout,
                extra={"event": "worker_down", "worker": name},
            )
            self.metrics.worker_up.labels(hostname=name).set(0)
            self.metrics.worker_tasks_active.labels(hostname=name).set(0)
        return gone


def _s(value: Any) -> str:
    return "" if value is None else str(value)


class EventFollower:
    """A daemon thread holding a Celery event receiver; reconnects with backoff on errors."""

    def __init__(self, app: Celery, handler: EventHandler, *, max_backoff: float = 10.0) -> None:
        self.app = app
        self.handler = handler
        self.max_backoff = max_backoff
        self._stop = threading.Event()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, name="beatflow-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._receiver is not None:
            self._receiver.should_stop = True
        if self._thread.is_alive():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        up = self.handler.metrics.source_up.labels(source="events")
        retrying = tenacity.Retrying(
            wait=tenacity.wait_exponential(multiplier=1, max=self.max_backoff),
            stop=lambda _state: self._stop.is_set(),
            sleep=self._pause,
            before_sleep=lambda state: self._lost(up, state),
            retry_error_callback=lambda _state: None,  # stopped while the broker was down
        )
        for attempt in retrying:
            with attempt:
                self._capture(up, attempt.retry_state)
        up.set(0)

    def _capture(self, up: Any, state: tenacity.RetryCallState) -> None:
        if self._stop.is_set():
            return
        with self.app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1)
            receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            self._receiver = receiver
            up.set(1)
            if state.attempt_number > 1:
                log.info(
                    "event stream reconnected", extra={"event": "source_up", "source": "events"}
                )
            state.attempt_number = 1  # once the stream was up, the backoff starts over at 1 s
            receiver.capture(limit=None, timeout=None, wakeup=True)

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)  # stop() cuts the wait short

    @staticmethod
    def _lost(up: Any, state: tenacity.RetryCallState) -> None:
        # a broker blip must never end the thread: every exception is retried
        up.set(0)
        delay = state.next_action.sleep if state.next_action else 0.0
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "event stream lost (%s); reconnecting in %.1fs",
            exc,
            delay,
            extra={"event": "source_down", "source": "events"},
        )

    def _on_event(self, event: Mapping[str, Any]) -> None:
        try:
            self.handler.handle(event)
        except Exception:  # one malformed event must not stop the stream
            log.exception("could not handle event %r", event.get("type"))
