"""A DAG run's life: trigger (create the run record, check conf), dispatch (send its canvas,
respecting max_active_runs), close (final state, next queued run). Following a run: runs.follow."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import kombu.exceptions
import redis.exceptions
from celery import Celery
from celery.canvas import Signature

from beatflow.dag.compile import compile_run
from beatflow.errors import BeatflowError, BrokerUnavailableError, RunNotFoundError
from beatflow.execution import announce, events, rules
from beatflow.execution.canvas import sending_canvas
from beatflow.execution.send import sending_together
from beatflow.ids import check_run_id
from beatflow.runs.follow import FALLBACK_POLL, follow_listening, listen
from beatflow.runs.follow import follow_run as follow_run  # moved there; old imports name it here
from beatflow.runtime import Runtime, runtime_of
from beatflow.states import DAG_RUN_ACTIVE, DAG_RUN_FINAL, DagRunState
from beatflow.store.records import ScheduledRunDraft

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

FINISHED = DAG_RUN_FINAL
# runs of a trigger_dags batch per round trip to the broker: the first reach the workers while
# the rest are still being built
SEND_CHUNK = 100
# What a publish raises when the broker (or the Redis result backend a chord needs) is down,
# after the short publish retry policy of Settings.celery_config.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
)


def is_broker_error(exc: BaseException) -> bool:
    """Whether a publish failed because Redis (broker or result backend) is unreachable."""
    if isinstance(exc, BROKER_ERRORS):
        return True
    # celery's Redis result consumer gives up reconnecting with a bare RuntimeError
    return isinstance(exc, RuntimeError) and "reconnect to the Celery result store" in str(exc)


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
    followed: bool = False,
) -> DagRunRecord:
    """Create a DAG run and send it to the workers; the same run id twice is one run.
    ``followed``: the caller listens on the run's channel already (``runs.trigger_and_follow``),
    so a new run is created marked followed and its end is announced.

    Raises DagNotFoundError for an unknown DAG and ConfError for a bad conf (nothing enqueued),
    BrokerUnavailableError when the run was created but could not be sent (it stays queued:
    the reconciler, or the same trigger again, sends it once the broker is back).
    """
    runtime = runtime_of(app)
    dag = runtime.dag(dag_id)
    resolved = dag.resolve_conf(conf)
    if run_id is not None:
        check_run_id(run_id, manual=trigger == "manual")
    run_id = run_id or make_run_id(trigger if trigger != "scheduled" else "scheduled", logical_date)
    # create and dispatch in one store call: one transaction, one round trip on PostgreSQL
    triggered = runtime.store.create_and_start_dag_run(
        dag_id,
        run_id,
        dag.max_active_runs,
        logical_date=logical_date or datetime.now(UTC),
        trigger=trigger,
        conf=resolved,
        leader_epoch=leader_epoch,
        followed=followed,
    )
    record = triggered.run
    if triggered.created:
        log.info(
            "DAG run %s/%s created (%s)",
            dag_id,
            run_id,
            trigger,
            extra={"dag_id": dag_id, "run_id": run_id},
        )
    else:
        # The same run id again (a retried fire, a re-run CLI command): never a second run, but
        # a run still queued (its first dispatch failed) got its dispatch in the same call.
        log.info("DAG run %s/%s exists already (%s)", dag_id, run_id, record.state)
    send_started(runtime, dag_id, triggered.started)
    return record


def trigger_and_follow(
    app: Celery,
    dag_id: str,
    *,
    conf: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    on_triggered: Callable[[DagRunRecord], None] | None = None,
    on_task_change: Callable[[TaskRunRecord], None] | None = None,
    timeout: float = 3600.0,
    poll: float = FALLBACK_POLL,
) -> DagRunRecord:
    """Trigger a manual run and follow it to its end (``beatflow dags trigger --wait``): the
    run as it ended. ``on_triggered`` gets the run as the trigger returned it; the rest is
    ``follow_run``'s, which this is, but for its start: it subscribes to the run's channel
    before the trigger, so the run is created marked followed and its end announced, and no
    second write (the follower's mark) or read runs beside the run's first task. A run id that
    exists already is followed as ``follow_run`` does (a read that marks it).

    Raises what ``trigger_dag`` raises before anything is created, and then what ``follow_run``
    raises; a trigger that fails leaves nothing subscribed."""
    run_id = run_id or make_run_id("manual")  # checked by trigger_dag
    wakeups = listen(app, dag_id, run_id, tasks=on_task_change is not None)
    try:
        record = trigger_dag(
            app, dag_id, conf=conf, run_id=run_id, followed=wakeups.pubsub is not None
        )
        if on_triggered is not None:
            on_triggered(record)
        return follow_listening(
            app, wakeups, known=record, on_task_change=on_task_change, timeout=timeout, poll=poll
        )
    finally:
        wakeups.close()


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run of a ``trigger_dags`` batch: its DAG, its conf, and (optionally) its run id."""

    dag_id: str
    conf: Mapping[str, Any] | None = None
    run_id: str | None = None


def trigger_dags(app: Celery, requests: Iterable[RunRequest | str]) -> list[DagRunRecord]:
    """Create many manual DAG runs and send them (a DAG id alone asks for a run with the default
    conf): ``trigger_dag`` for a batch, in a few round trips whatever its size. The runs are
    created in multi-row inserts (one transaction per INSERT_CHUNK runs), the queued runs of
    every DAG named are started in one transaction (max_active_runs holds: the rest wait
    queued), and their canvases reach the broker SEND_CHUNK to a round trip. Returns the runs in the
    order asked, each as ``trigger_dag`` would return it; their logical dates follow that
    order, one microsecond apart, so the generated run ids differ and the oldest-first
    dispatch keeps it.

    Every request is checked before anything is written: an unknown DAG (DagNotFoundError), a
    conf its DAG refuses (ConfError) or a bad run id (InvalidIdError) raises with a note naming the
    request, and nothing is created. The same run id twice, in the batch or already there, is
    one run. A store that fails on the way (StoreUnavailableError) may leave the runs of the
    first chunks created and queued, and a broker lost on the way leaves every run not known
    to be sent queued (BrokerUnavailableError): the reconciler sends them, and the same call
    again with the same run ids creates nothing twice."""
    if isinstance(requests, (str, RunRequest)):  # one run: a string iterates as characters
        raise TypeError("trigger_dags takes a list of requests; trigger_dag triggers one run")
    runtime = runtime_of(app)
    now = datetime.now(UTC)
    drafts: list[ScheduledRunDraft] = []
    for index, request in enumerate(requests):
        asked = RunRequest(request) if isinstance(request, str) else request
        try:
            drafts.append(_manual_draft(runtime, asked, now + timedelta(microseconds=index)))
        except Exception as exc:
            exc.add_note(f"in request {index} of the batch ({asked.dag_id!r}); nothing created")
            raise
    if not drafts:
        return []
    made = runtime.store.create_dag_runs(drafts)
    asked_of = Counter(d.dag_id for d in drafts)
    created = Counter(run.dag_id for run, new in made if new)
    for dag_id, asked_n in asked_of.items():
        log.info(
            "%d DAG run(s) of %s created (%d asked, manual)",
            created[dag_id],
            dag_id,
            asked_n,
            extra={"dag_id": dag_id},
        )
    limits = {dag_id: runtime.dag(dag_id).max_active_runs for dag_id in asked_of}
    started = runtime.store.start_queued_dag_runs_of(limits)
    runs = [(dag_id, run.run_id) for dag_id, mine in started.items() for run in mine]
    for i in range(0, len(runs), SEND_CHUNK):
        chunk = runs[i : i + SEND_CHUNK]
        try:
            with sending_runs(runtime, chunk):  # one round trip to the broker per chunk
                for dag_id, run_id in chunk:
                    send_run(runtime, dag_id, run_id)
        except BrokerUnavailableError:
            back_to_queued(runtime, runs[i + SEND_CHUNK :])  # not tried: queued as well
            raise
    now_running = {(run.dag_id, run.run_id): run for mine in started.values() for run in mine}
    return [now_running.get((run.dag_id, run.run_id), run) for run, _ in made]


def _manual_draft(runtime: Runtime, asked: RunRequest, logical_date: datetime) -> ScheduledRunDraft:
    """A manual run of a ``trigger_dags`` batch, with the checks ``trigger_dag`` makes (the
    store checks every draft's values before it writes the first)."""
    dag = runtime.dag(asked.dag_id)
    conf = dag.resolve_conf(asked.conf)
    if asked.run_id is not None:
        check_run_id(asked.run_id, manual=True)
    run_id = asked.run_id or make_run_id("manual", logical_date)
    return ScheduledRunDraft(dag.dag_id, run_id, logical_date, "manual", conf)


def send_canvas(app: Celery, canvas: Signature) -> None:
    """Send a DAG run's canvas without keeping result subscriptions.

    Celery's Redis backend subscribes the sender to the result channel of every group member it
    sends (for ``then`` callbacks). beatflow never waits on those results (task runs live in the
    results DB and node tasks store no Celery result), so in a long-lived sender — the beat, an
    API process — the subscriptions would only pile up (celery#3812). beatflow's result
    backends (the only ones its settings allow) register none while canvas is sent
    (``execution.canvas.sending_canvas``).
    """
    with sending_canvas():
        canvas.apply_async(ignore_result=True)


def dispatch_waiting(runtime: Runtime, dag_id: str) -> int:
    """Start and send the oldest queued runs of ``dag_id`` (by logical date) while
    max_active_runs allows; returns how many were sent.

    The queued -> running step is one store transaction with one winner per DAG
    (``start_queued_dag_runs``), so concurrent dispatchers (closers, triggers, reconcilers)
    never send a run twice nor exceed the limit, and its cost is bounded by the limit, not by
    the number of queued runs. A run that cannot be sent goes back to queued for the next
    dispatch (the reconciler retries); BrokerUnavailableError tells the caller.
    """
    return len(_dispatch(runtime, dag_id))


def _dispatch(runtime: Runtime, dag_id: str, *, if_queued: bool = False) -> list[DagRunRecord]:
    """dispatch_waiting's work; returns the runs it started and sent. ``if_queued``: look for
    a queued run first, without the dispatch lock (a closer's common case is none)."""
    dag = runtime.dag(dag_id)
    started = runtime.store.start_queued_dag_runs(dag_id, dag.max_active_runs, if_queued=if_queued)
    send_started(runtime, dag_id, started)
    return started


def send_started(runtime: Runtime, dag_id: str, started: Sequence[DagRunRecord]) -> None:
    """Send the runs a dispatch started, oldest first, in one round trip to the broker, with
    their ``task-sent`` events in one message (one run's message and event, too). A broker
    that cannot be reached puts them back to queued for a later dispatch and raises
    BrokerUnavailableError."""
    if not started:
        return
    with sending_runs(runtime, [(dag_id, run.run_id) for run in started]):
        for run in started:
            send_run(runtime, dag_id, run.run_id)


@contextlib.contextmanager
def sending_runs(runtime: Runtime, runs: Sequence[tuple[str, str]]) -> Iterator[None]:
    """A ``sending_together`` block for the canvases of ``runs`` (``(dag_id, run_id)``, started:
    running). The broker lost as the block ends (or on the way) leaves unknown which of them
    arrived: every one still running goes back to queued, so a later dispatch sends it again
    (the copies that did arrive are harmless: task runs are claimed by their dedupe keys), and
    BrokerUnavailableError is raised. A run whose requeue fails too (the store down as well)
    stays running for the reconciler to resume."""
    try:
        with sending_together(runtime.app):
            yield
    except Exception as exc:
        lost = exc if isinstance(exc, BrokerUnavailableError) else None
        if lost is None and not is_broker_error(exc):
            raise
        back_to_queued(runtime, runs)
        if lost is not None:
            raise
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log.warning(
            "broker unreachable, %d DAG run(s) not sent (%s); back to queued", len(runs), cause
        )
        dag_id, run_id = runs[0]
        raise BrokerUnavailableError(dag_id, run_id, cause) from exc


def back_to_queued(runtime: Runtime, runs: Sequence[tuple[str, str]]) -> None:
    """Put started runs that may not have reached the broker back to queued, for a later
    dispatch; a run whose requeue fails too (the store down as well) stays running for the
    reconciler to resume."""
    for dag_id, run_id in runs:
        with contextlib.suppress(BeatflowError):
            runtime.store.transition_dag_run(
                dag_id, run_id, to=DagRunState.QUEUED, from_states={DagRunState.RUNNING}
            )


def send_run(runtime: Runtime, dag_id: str, run_id: str) -> None:
    """Compile and send the canvas of a running run (dispatch, resume, clear).

    A broker that cannot be reached puts the run back to queued (so a later dispatch sends it)
    and raises BrokerUnavailableError; a DAG that no longer compiles fails the run with the
    reason. Re-sending a run is always safe: its task runs are deduped.
    """
    dag = runtime.dag(dag_id)
    try:
        canvas = compile_run(runtime.app, dag, run_id)
    except Exception as exc:  # a DAG changed under a run must end it, not hang it
        reason = f"could not compile the run's canvas: {type(exc).__name__}: {exc}"
        log.exception("DAG run %s/%s %s", dag_id, run_id, reason)
        runtime.store.transition_dag_run(
            dag_id, run_id, to=DagRunState.FAILED, from_states=DAG_RUN_ACTIVE, reason=reason
        )
        return
    try:
        send_canvas(runtime.app, canvas)
    except Exception as exc:
        if not is_broker_error(exc):
            raise
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        log.warning(
            "broker unreachable, DAG run %s/%s not sent (%s); back to queued",
            dag_id,
            run_id,
            cause,
            extra={"dag_id": dag_id, "run_id": run_id},
        )
        runtime.store.transition_dag_run(
            dag_id, run_id, to=DagRunState.QUEUED, from_states={DagRunState.RUNNING}
        )
        raise BrokerUnavailableError(dag_id, run_id, cause) from exc


def close_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    tasks: Sequence[TaskRunRecord] | None = None,
    on_closed: Callable[[DagRunRecord], None] | None = None,
    closed: DagRunRecord | None = None,
    started: Sequence[DagRunRecord] = (),
) -> str:
    """The canvas's last step (and the reconciler's): set the DAG run's final state once every
    task of it has a final row, then start waiting runs. A run that is not final yet is left
    running (the reconciler resumes it if its canvas is gone); returns the run's state.

    ``tasks``: every task run of the run as the caller (the closing task) already holds them;
    they are read afresh when they do not make the run final. ``on_closed``: called with the
    run this call ended instead of sending the DAG-run event (the closing task reports it in
    its own task-succeeded event). ``closed``: the run as the closing task's own finish ended
    it (``store.finish_and_close``), and ``started`` the waiting runs that call started:
    nothing is left to write, only what follows a close, and those runs to send."""
    store = runtime.store
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError:
        dag = None
    if closed is not None:
        return _closed(runtime, dag, closed, on_closed, started=started)
    state = run_outcome(dag, tasks) if tasks is not None else None
    if state is None:
        state = run_outcome(dag, store.get_task_runs(dag_id, run_id))
    if state is None:
        log.info(
            "DAG run %s/%s not closed: some of its tasks are not final",
            dag_id,
            run_id,
            extra={"dag_id": dag_id, "run_id": run_id},
        )
        current = store.get_dag_run(dag_id, run_id)
        return current.state if current is not None else DagRunState.RUNNING
    record = store.transition_dag_run_returning(
        dag_id, run_id, to=state, from_states=DAG_RUN_ACTIVE
    )
    if record is None:  # ended already: cancelled, marked, or closed by a duplicate closing step
        current = store.get_dag_run(dag_id, run_id)
        if current is None:
            raise RunNotFoundError(dag_id, run_id)
        return current.state
    return _closed(runtime, dag, record, on_closed)


def _closed(
    runtime: Runtime,
    dag: DAG | None,
    record: DagRunRecord,
    on_closed: Callable[[DagRunRecord], None] | None,
    *,
    started: Sequence[DagRunRecord] | None = None,
) -> str:
    """What follows a DAG run's end: the announcement, the log line, its event (or
    ``on_closed``), the DAG's on_failure callback, and the dispatch of waiting runs (or, when
    the close already started them, ``started``: sending them)."""
    dag_id, run_id = record.dag_id, record.run_id
    if record.followed:  # someone listens (migration 0013): wake it
        announce.announce_end(runtime.app, record)
    log.info(
        "DAG run %s/%s finished: %s in %.3fs",
        dag_id,
        run_id,
        record.state,
        record.duration_seconds or 0.0,
        extra={"dag_id": dag_id, "run_id": run_id},
    )
    if on_closed is not None:
        on_closed(record)
    else:
        events.dag_run_finished(dag_id, record.state, record.duration_seconds)
    if dag is None:
        return record.state
    if record.state == "failed" and dag.on_failure is not None:
        try:
            dag.on_failure(dag_id=dag_id, run_id=run_id, state=record.state)
        except Exception:  # a user's callback must not change the outcome
            log.exception("on_failure callback of DAG %s raised", dag_id)
    if started is None:
        dispatch_quietly(runtime, dag_id)
    else:
        send_quietly(runtime, dag_id, started)
    return record.state


def run_outcome(dag: DAG | None, tasks: Sequence[TaskRunRecord]) -> DagRunState | None:
    """The final state of a run from its task runs, or None while any task (any map instance)
    of the DAG has no final row. Without the DAG (not loaded here) only the rows count."""
    if dag is None:
        return rules.dag_run_state([t.state for t in tasks])
    from beatflow.execution import decide  # the node wrapper's pure decisions

    expected = {task_id: spec.map_over is not None for task_id, spec in dag.tasks.items()}
    return decide.run_outcome(expected, tasks)


def send_quietly(runtime: Runtime, dag_id: str, started: Sequence[DagRunRecord]) -> None:
    """send_started for a closer that must not fail because of it: a run the broker refuses
    goes back to queued (the reconciler sends it once the broker is back)."""
    try:
        send_started(runtime, dag_id, started)
    except BrokerUnavailableError as exc:
        log.warning("%s", exc, extra={"dag_id": dag_id})


def dispatch_quietly(runtime: Runtime, dag_id: str) -> int:
    """dispatch_waiting for callers that must not fail because of it (closing a run, the
    reconciler): a run that cannot be sent stays queued for the next pass. It looks for a
    queued run before taking the dispatch lock: no wake-up is lost that way, since a trigger
    commits its queued run before it counts the running ones, and a closer commits the run's
    end before it looks (one of the two sees the other)."""
    try:
        return len(_dispatch(runtime, dag_id, if_queued=True))
    except BrokerUnavailableError as exc:
        log.warning("%s", exc, extra={"dag_id": dag_id})
        return 0
