"""Triggering DAG runs by hand (``beatflow dags trigger``, the web API and UI, the Python API):
the request checked once (the DAG, its conf, the run id: :func:`beatflow.ids.check_run_id`), the
run created and its DAG dispatched in one store transaction — with the operator's audit record
in that transaction — and the runs that started sent to the workers."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from beatflow.errors import BrokerUnavailableError
from beatflow.ids import check_run_id
from beatflow.runs.dispatch import back_to_queued, send_run, send_started, sending_runs
from beatflow.runs.follow import FALLBACK_POLL, follow_listening, listen
from beatflow.runtime import Runtime
from beatflow.store.records import AuditNote, ScheduledRunDraft

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.runs.consumers import QueueCheck
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

# runs of a trigger_dags batch per round trip to the broker: the first reach the workers while
# the rest are still being built
SEND_CHUNK = 100


def make_run_id(trigger: str, logical_date: datetime | None = None) -> str:
    """``scheduled__2026-11-29T10:00:00+00:00`` from a tick; ``manual__<now>`` otherwise."""
    when = logical_date or datetime.now(UTC)
    return f"{trigger}__{when.astimezone(UTC).isoformat(timespec='microseconds')}"


def trigger_dag(
    runtime: Runtime,
    dag_id: str,
    *,
    conf: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    logical_date: datetime | None = None,
    trigger: str = "manual",
    leader_epoch: int | None = None,
    followed: bool = False,
    actor: str | None = None,
    reason: str = "",
) -> DagRunRecord:
    """Create a DAG run and send it to the workers; the same run id twice is one run.
    ``followed``: the caller listens on the run's channel already (``runs.trigger_and_follow``),
    so a new run is created marked followed and its end is announced. ``actor`` (a user, a
    token, ``cli:<os user>``): an operator asked for it, so its audit record (with ``reason``)
    is written in the run's own transaction; none without.

    Raises DagNotFoundError for an unknown DAG, ConfError for a bad conf and InvalidIdError
    for a bad run id (nothing written), BrokerUnavailableError when the run was created but
    could not be sent (it stays queued: the reconciler, or the same trigger again, sends it
    once the broker is back).
    """
    dag, resolved = _checked(runtime, dag_id, conf, run_id, manual=trigger == "manual")
    return _create_and_send(
        runtime,
        dag,
        run_id or make_run_id(trigger, logical_date),
        resolved,
        logical_date=logical_date,
        trigger=trigger,
        leader_epoch=leader_epoch,
        followed=followed,
        audit=_audit_note(actor, conf, reason),
    )


def _checked(
    runtime: Runtime,
    dag_id: str,
    conf: Mapping[str, Any] | None,
    run_id: str | None,
    *,
    manual: bool,
) -> tuple[DAG, dict[str, Any]]:
    """What every trigger checks, once, before anything is written: the DAG (loaded here),
    its conf (resolved against its params) and the run id asked for (a manual one may not
    take the beat's prefixes)."""
    dag = runtime.dag(dag_id)
    resolved = dag.resolve_conf(conf)
    if run_id is not None:
        check_run_id(run_id, manual=manual)
    return dag, resolved


def _audit_note(actor: str | None, conf: Mapping[str, Any] | None, reason: str) -> AuditNote | None:
    if actor is None:
        return None
    return AuditNote(actor, "trigger", {"conf": dict(conf or {}), "reason": reason})


def _create_and_send(
    runtime: Runtime,
    dag: DAG,
    run_id: str,
    conf: dict[str, Any],
    *,
    logical_date: datetime | None = None,
    trigger: str = "manual",
    leader_epoch: int | None = None,
    followed: bool = False,
    audit: AuditNote | None = None,
) -> DagRunRecord:
    """The checked trigger: create and dispatch in one store call (one transaction, one round
    trip on PostgreSQL, the audit record in it), then send what it started."""
    dag_id = dag.dag_id
    triggered = runtime.store.create_and_start_dag_run(
        dag_id,
        run_id,
        dag.max_active_runs,
        logical_date=logical_date or datetime.now(UTC),
        trigger=trigger,
        conf=conf,
        leader_epoch=leader_epoch,
        followed=followed,
        audit=audit,
    )
    record = triggered.run
    by = "" if audit is None else f" by {audit.actor}"
    if triggered.created:
        log.info(
            "DAG run %s/%s created (%s%s)",
            dag_id,
            run_id,
            trigger,
            by,
            extra={"dag_id": dag_id, "run_id": run_id},
        )
    else:
        # The same run id again (a retried fire, a re-run CLI command): never a second run, but
        # a run still queued (its first dispatch failed) got its dispatch in the same call.
        log.info("DAG run %s/%s exists already (%s)%s", dag_id, run_id, record.state, by)
    send_started(runtime, dag_id, triggered.started)
    return record


def trigger_and_follow(
    runtime: Runtime,
    dag_id: str,
    *,
    conf: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    on_triggered: Callable[[DagRunRecord], None] | None = None,
    on_task_change: Callable[[TaskRunRecord], None] | None = None,
    on_unconsumed: Callable[[QueueCheck], None] | None = None,
    timeout: float = 3600.0,
    poll: float = FALLBACK_POLL,
    actor: str | None = None,
    reason: str = "",
) -> DagRunRecord:
    """Trigger a manual run and follow it to its end (``beatflow dags trigger --wait``): the
    run as it ended. ``on_triggered`` gets the run as the trigger returned it; the rest is
    ``follow_run``'s, which this is, but for its start: it subscribes to the run's channel
    before the trigger, so the run is created marked followed and its end announced, and no
    second write (the follower's mark) or read runs beside the run's first task. A run id that
    exists already is followed as ``follow_run`` does (a read that marks it). ``actor`` and
    ``reason``: as ``trigger_dag``'s.

    Raises what ``trigger_dag`` raises before anything is created (and before subscribing),
    and then what ``follow_run`` raises; a trigger that fails leaves nothing subscribed."""
    dag, resolved = _checked(runtime, dag_id, conf, run_id, manual=True)
    run_id = run_id or make_run_id("manual")
    wakeups = listen(runtime, dag_id, run_id, tasks=on_task_change is not None)
    try:
        record = _create_and_send(
            runtime,
            dag,
            run_id,
            resolved,
            followed=wakeups.pubsub is not None,
            audit=_audit_note(actor, conf, reason),
        )
        if on_triggered is not None:
            on_triggered(record)
        return follow_listening(
            runtime,
            wakeups,
            known=record,
            on_task_change=on_task_change,
            on_unconsumed=on_unconsumed,
            timeout=timeout,
            poll=poll,
        )
    finally:
        wakeups.close()


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run of a ``trigger_dags`` batch: its DAG, its conf, and (optionally) its run id."""

    dag_id: str
    conf: Mapping[str, Any] | None = None
    run_id: str | None = None


def trigger_dags(runtime: Runtime, requests: Iterable[RunRequest | str]) -> list[DagRunRecord]:
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
    dag, conf = _checked(runtime, asked.dag_id, asked.conf, asked.run_id, manual=True)
    run_id = asked.run_id or make_run_id("manual", logical_date)
    return ScheduledRunDraft(dag.dag_id, run_id, logical_date, "manual", conf)
