"""The reconciler: brings every DAG run to an end whatever was lost on the way.

Highly available without a process of its own: every worker runs a small thread that, every
``reconcile_interval`` seconds, tries to hold a short Redis lease (``beatflow:reconciler:lease``,
SET NX PX, renewed by its holder with a token check); the holder runs one pass. A dead holder's
lease lapses after three intervals and another worker takes over. A pass is idempotent and
bounded (``reconcile_batch`` runs per kind), so two passes at once (a lease lost mid-pass) only
do the same safe things twice. ``beatflow dev`` runs a worker, so it runs the reconciler too.

One pass:
1. dispatches queued runs of DAGs with free slots (a dispatch that failed, a lost trigger);
2. releases the next runs of backfills whose runs ended (``runs.backfill``);
3. fails runs past their DAG's ``dagrun_timeout`` (remaining task runs cancelled);
4. for each running run with no sign of life for ``reconcile_stall_seconds`` (no live lease,
   no task run started or ended): closes it if every task is final (the closing step was
   lost), else resumes it by re-sending its canvas (finished task runs return their stored
   results, live leases are respected; a retry waiting for its backoff and a sensor waiting
   for its next poke are not silence), waiting twice as long after each resume; after
   ``reconcile_max_resumes`` resumes without progress the run is failed with the reason.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery, signals
from redis.exceptions import LockNotOwnedError

from beatflow import connections, keys
from beatflow.errors import BeatflowError, BrokerUnavailableError, DagNotFoundError
from beatflow.execution.backoff import retry_due
from beatflow.notify.sweep import enqueue_missing, resend_pending
from beatflow.runs.backfill import advance_backfill
from beatflow.runs.close import close_run, run_outcome
from beatflow.runs.dispatch import dispatch_quietly, send_run
from beatflow.runtime import Runtime, runtime_of
from beatflow.states import DagRunState, TaskRunState

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

LEASE_KEY = keys.RECONCILER_LEASE
EVENT = "beatflow-reconciler"


@dataclass
class PassReport:
    """What one pass did: the runs it dispatched, closed, resumed and failed."""

    dispatched: int = 0
    closed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    notifications: int = 0  # notifier events sent again, or written when missing

    @property
    def acted(self) -> bool:
        return bool(self.dispatched or self.closed or self.resumed or self.failed)


def reconcile_once(runtime: Runtime, *, now: datetime | None = None) -> PassReport:
    """One pass over the results database (see the module docstring); safe to run anywhere,
    any number of times, concurrently."""
    settings = runtime.settings
    store = runtime.store
    report = PassReport()
    limit = settings.reconcile_batch
    for dag_id in store.dag_ids_with_queued_runs(limit=limit):
        try:
            report.dispatched += dispatch_quietly(runtime, dag_id)
        except DagNotFoundError:
            log.warning("queued runs of DAG %s wait: the DAG is not loaded here", dag_id)
    at = now or datetime.now(UTC)
    for dag in runtime.dagbag.dags.values():
        if dag.dagrun_timeout is None:
            continue
        for run in store.running_dag_runs_started_before(
            dag.dag_id, at - dag.dagrun_timeout, limit=limit
        ):
            reason = f"timed out: still running after dagrun_timeout={dag.dagrun_timeout}"
            if fail_run(runtime, run, reason, action="timed_out"):
                report.failed.append(_name(run))
    stall = timedelta(seconds=settings.reconcile_stall_seconds)
    for run in store.stalled_dag_runs(stall, limit=limit):
        _reconcile_stalled(runtime, run, stall, report)
    # backfills whose runs ended: release their next runs under their own max_active_runs
    for record in store.running_backfills(limit=limit):
        try:
            report.dispatched += advance_backfill(runtime, record)
        except (DagNotFoundError, BrokerUnavailableError) as exc:
            log.warning("backfill %d of %s waits: %s", record.id, record.dag_id, exc)
    # notifier events whose message, or whose outbox row, was lost (notify.sweep)
    report.notifications = resend_pending(runtime, limit) + enqueue_missing(runtime, limit)
    return report


def _reconcile_stalled(
    runtime: Runtime, run: DagRunRecord, stall: timedelta, report: PassReport
) -> None:
    store = runtime.store
    try:
        dag = runtime.dag(run.dag_id)
    except DagNotFoundError:
        dag = None
    tasks = store.get_task_runs(run.dag_id, run.run_id) if dag is not None else []
    if dag is not None and _retry_pending(dag, tasks, stall):
        return  # a retry waits for its backoff: that is progress, not a lost canvas
    if _poke_pending(runtime, run, tasks, stall):
        return  # a sensor waits for its next poke: its message is in the broker with an ETA
    if dag is not None and run_outcome(dag, tasks):
        state = close_run(runtime, run.dag_id, run.run_id)
        log.warning(
            "reconciler closed DAG run %s: every task was final, its closing step was lost (%s)",
            _name(run),
            state,
            extra={"dag_id": run.dag_id, "run_id": run.run_id},
        )
        _emit(runtime.app, "closed", run.dag_id)
        report.closed.append(_name(run))
        return
    if run.resume_count >= runtime.settings.reconcile_max_resumes:
        reason = (
            f"no progress after {run.resume_count} resumes by the reconciler "
            f"(silent for {stall.total_seconds():.0f}s each time)"
        )
        if dag is None:
            reason = f"DAG {run.dag_id} is not loaded on any worker that reconciled it; " + reason
        if fail_run(runtime, run, reason, action="failed"):
            report.failed.append(_name(run))
        return
    backoff = stall * (2**run.resume_count)
    if not store.record_resume(
        run.dag_id, run.run_id, seen_count=run.resume_count, not_before=backoff
    ):
        return  # another reconciler resumed it, or it ended meanwhile
    if dag is None:
        log.warning("DAG run %s is stalled but its DAG is not loaded here; not resumed", _name(run))
        return
    log.warning(
        "reconciler resumes DAG run %s: no progress for %.0fs (resume %d of %d)",
        _name(run),
        stall.total_seconds(),
        run.resume_count + 1,
        runtime.settings.reconcile_max_resumes,
        extra={"dag_id": run.dag_id, "run_id": run.run_id},
    )
    try:
        send_run(runtime, run.dag_id, run.run_id)
    except BrokerUnavailableError as exc:
        log.warning("%s", exc)
        return
    _emit(runtime.app, "resumed", run.dag_id)
    report.resumed.append(_name(run))


def _retry_pending(dag: DAG, tasks: Sequence[TaskRunRecord], stall: timedelta) -> bool:
    """Whether a task run waits for its retry (up_for_retry, due within its backoff plus the
    stall time; ``execution.backoff.retry_due``, however far out): its message is in the broker
    with an ETA (capped: it may wake and wait again), so the run is not silent. Resumed anyway,
    a retry not yet due is harmless: its re-sent message waits for it (worker/node.py)."""
    now = datetime.now(UTC)
    for t in tasks:
        spec = dag.tasks.get(t.task_id)
        if spec is None:
            continue
        due = retry_due(t, spec.retry)
        if due is not None and now < due + stall:
            return True
    return False


def _poke_pending(
    runtime: Runtime, run: DagRunRecord, tasks: Sequence[TaskRunRecord], stall: timedelta
) -> bool:
    """Whether a sensor waits for its next poke (up_for_reschedule, due within the stall time):
    not silent. One whose next poke is overdue by more lost its message (a worker killed holding
    it, a broker restarted): the run is resumed and the re-sent sensor pokes (worker/sensor.py)."""
    if not any(t.state == TaskRunState.UP_FOR_RESCHEDULE for t in tasks):
        return False
    now = datetime.now(UTC)
    waiting = {t.dedupe_key for t in tasks if t.state == TaskRunState.UP_FOR_RESCHEDULE}
    pokes = runtime.store.sensor_pokes_of_run(run.dag_id, run.run_id)
    return any(p.dedupe_key in waiting and now < p.next_poke_at + stall for p in pokes)


def fail_run(runtime: Runtime, run: DagRunRecord, reason: str, *, action: str) -> bool:
    """Fail a running run (one winner), cancel its unfinished task runs, revoke their
    messages, start the next queued run. False if the run was no longer running."""
    from beatflow.runs.operator import revoke_task_runs

    store = runtime.store
    if not store.transition_dag_run(
        run.dag_id,
        run.run_id,
        to=DagRunState.FAILED,
        from_states={DagRunState.RUNNING},
        reason=reason,
    ):
        return False
    cancelled = store.cancel_task_runs(run.dag_id, run.run_id, reason=reason)
    revoke_task_runs(runtime, cancelled, terminate=False)
    log.error(
        "reconciler failed DAG run %s: %s",
        _name(run),
        reason,
        extra={"dag_id": run.dag_id, "run_id": run.run_id},
    )
    _emit(runtime.app, action, run.dag_id)
    with contextlib.suppress(DagNotFoundError):
        dispatch_quietly(runtime, run.dag_id)
    return True


def _name(run: DagRunRecord) -> str:
    return f"{run.dag_id}/{run.run_id}"


def _emit(app: Celery, action: str, dag_id: str) -> None:
    """A Celery event the exporter counts (beatflow_reconciler_actions_total)."""
    try:
        with app.connection_for_write() as conn:
            dispatcher = app.events.Dispatcher(conn, enabled=True, buffer_while_offline=False)
            dispatcher.send(EVENT, action=action, dag_id=dag_id)
            dispatcher.close()
    except Exception:  # metrics must never stop the reconciler
        log.debug("could not send the %s event", EVENT, exc_info=True)


class Reconciler:
    """The background thread of one process: hold the lease, run a pass every interval."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        redis_client: redis.Redis | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> None:
        self.runtime = runtime
        settings = runtime.settings
        self.interval = settings.reconcile_interval
        self.lease_ms = int(self.interval * 3 * 1000)
        # the one client factory: a sentinel:// broker URL follows the master, rediss:// checks
        # certificates (redis-py's from_url refuses sentinel://, and a worker_ready handler's
        # error is swallowed: no reconciler would run at all)
        url = settings.effective_redis_url  # the broker's, or BEATFLOW_REDIS_URL's (RabbitMQ)
        self.redis = redis_client or connections.redis_client(url, timeout=5)
        self.token = uuid.uuid4().hex
        # redis-py's Lock is the lease: taken with SET NX PX, renewed and released only by its
        # token's holder (its own Lua scripts). Not thread-local: stop() releases it from the
        # thread that stops the reconciler, not the one that took it.
        self.lease = self.redis.lock(
            LEASE_KEY, timeout=self.lease_ms / 1000, blocking=False, thread_local=False
        )
        self.on_pass = on_pass
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holds_lease(self) -> bool:
        """Renew the lease if this process holds it, else try to take it."""
        if self.lease.local.token is not None:
            try:
                return bool(self.lease.reacquire())
            except LockNotOwnedError:  # it lapsed (this process stalled): take it anew if free
                self.lease.local.token = None
        return bool(self.lease.acquire(token=self.token))

    def tick(self) -> PassReport | None:
        """One interval: a pass if this process holds the lease; None otherwise."""
        try:
            if not self.holds_lease():
                return None
        except redis.RedisError as exc:
            log.warning("reconciler: Redis unreachable (%s); no pass this time", exc)
            return None
        try:
            report = reconcile_once(self.runtime)
        except BeatflowError as exc:  # the database is down: the next pass tries again
            log.warning("reconciler pass failed: %s", exc)
            return None
        if report.acted:
            log.info(
                "reconciler pass: %d dispatched, %d closed, %d resumed, %d failed",
                report.dispatched,
                len(report.closed),
                len(report.resumed),
                len(report.failed),
            )
        if self.on_pass is not None:
            self.on_pass(report)
        return report

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="beatflow-reconciler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with contextlib.suppress(redis.RedisError):  # hand the lease over at once
            if self.lease.local.token is not None:
                self.lease.release()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the thread must outlive any one bad pass
                log.exception("reconciler pass crashed; next pass in %.1fs", self.interval)


def register(app: Celery) -> None:
    """Run a Reconciler in every worker of ``app`` (its main process), unless disabled."""
    state: dict[str, Reconciler] = {}

    @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
    def _start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        runtime = runtime_of(app)
        if not runtime.settings.reconcile_enabled:
            return
        state["reconciler"] = Reconciler(runtime)
        state["reconciler"].start()

    @signals.worker_shutdown.connect(weak=False)  # type: ignore[untyped-decorator]
    def _stop(sender: Any = None, **_: Any) -> None:
        reconciler = state.pop("reconciler", None)
        if reconciler is not None:
            reconciler.stop()
