"""Sending DAG runs to the workers: start the oldest queued runs a DAG's max_active_runs allows
(one store transaction, one winner per DAG), compile their canvases and send them together; a
broker that cannot be reached puts them back to queued for a later dispatch."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import amqp.exceptions  # type: ignore[import-untyped]
import kombu.exceptions
import redis.exceptions
from celery import Celery
from celery.canvas import Signature

from beatflow.dag.compile import compile_run
from beatflow.errors import BeatflowError, BrokerUnavailableError
from beatflow.execution.canvas import sending_canvas
from beatflow.execution.send import sending_together
from beatflow.runtime import Runtime
from beatflow.states import DAG_RUN_ACTIVE, DagRunState

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord

log = logging.getLogger(__name__)

# What a publish raises when the broker (or the Redis result backend a chord needs) is down,
# after the short publish retry policy of Settings.celery_config; or when RabbitMQ closes the
# connection as it opens (an unknown vhost: a ConnectionError; a refused login: AccessRefused,
# which py-amqp files under channel errors).
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    amqp.exceptions.ConnectionError,
    amqp.exceptions.AccessRefused,
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
