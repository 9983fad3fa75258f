"""Scheduled ticks becoming DAG runs.

The beat creates the DAG run of each tick itself (:func:`create_scheduled_run`), in the results
DB, behind the leader-epoch fence, *before* it advances the DAG's watermark: a tick the
watermark passed always has its run. A tick whose DAG cannot run (a required param without a
default) becomes a failed run with its reason. Then the beat sends ``beatflow.fire_schedules``
(a batch of ``[dag_id, logical_date, trigger]`` and the leader epoch) and a worker dispatches
those runs. A worker that has not loaded the DAG retries later; the run waits queued meanwhile
(the reconciler dispatches it too). A fire from an epoch older than the newest one is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from celery import Celery
from celery import Task as CeleryTask

from beatflow.errors import (
    BrokerUnavailableError,
    ConfError,
    DagNotFoundError,
    StaleLeaderError,
    StoreUnavailableError,
)
from beatflow.execution.options import TASK_OPTIONS, store_retry_delay
from beatflow.runtime import Runtime, runtime_of
from beatflow.store.records import ScheduledRunDraft
from beatflow.times import parse_instant

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.store import DagRunRecord, Store

log = logging.getLogger(__name__)

FIRE_TASK = "beatflow.fire_schedule"
FIRE_BATCH_TASK = "beatflow.fire_schedules"
# the beat's asset pass sends the DAGs it created asset-triggered runs of (scheduler.assets)
DISPATCH_TASK = "beatflow.dispatch_queued"
FIRE_TRIGGERS = frozenset({"scheduled", "catchup"})
# a worker that has not loaded the DAG retries this often (deploy skew: the beat has the new
# DAG before the workers restart), then leaves the queued run to the reconciler
UNKNOWN_DAG_RETRIES = 20
UNKNOWN_DAG_DELAY = 15.0


def scheduled_run_id(tick: datetime) -> str:
    """``scheduled__<tick in UTC>``: one run per tick however many times it is fired."""
    return f"scheduled__{tick.astimezone(UTC).isoformat(timespec='microseconds')}"


def create_scheduled_run(
    store: Store, dag: DAG, tick: datetime, trigger: str, epoch: int
) -> DagRunRecord:
    """Create (or find) the DAG run of one tick, fenced by ``epoch``.

    A DAG whose params cannot be resolved without a conf gets a *failed* run carrying the reason,
    so the tick is recorded, never silently dropped. Raises StaleLeaderError when a newer leader
    epoch is recorded, StoreUnavailableError when the DB is down.
    """
    draft = scheduled_draft(dag, tick, trigger)
    record, created = store.create_fenced_dag_run(
        draft.dag_id,
        draft.run_id,
        logical_date=draft.logical_date,
        trigger=draft.trigger,
        conf=draft.conf,
        leader_epoch=epoch,
        failure_reason=draft.failure_reason,
    )
    _log_created(draft, created)
    return record


def create_scheduled_runs(store: Store, drafts: list[ScheduledRunDraft], epoch: int) -> None:
    """``create_scheduled_run`` for many ticks, in one fenced store call."""
    for draft, (_, created) in zip(
        drafts, store.create_fenced_dag_runs(drafts, leader_epoch=epoch), strict=True
    ):
        _log_created(draft, created)


def scheduled_draft(dag: DAG, tick: datetime, trigger: str) -> ScheduledRunDraft:
    """The run of one tick, to create: failed with the reason when the DAG's params cannot be
    resolved without a conf."""
    reason: str | None = None
    try:
        conf = dag.resolve_conf(None)
    except ConfError as exc:
        conf, reason = {}, f"the scheduled run cannot start: {exc}"
    return ScheduledRunDraft(
        dag.dag_id,
        scheduled_run_id(tick),
        tick,
        trigger if trigger in FIRE_TRIGGERS else "scheduled",
        conf,
        reason,
    )


def _log_created(draft: ScheduledRunDraft, created: bool) -> None:
    if created and draft.failure_reason is not None:
        log.error(
            "DAG %s tick %s recorded as a failed run: %s",
            draft.dag_id,
            draft.logical_date.isoformat(),
            draft.failure_reason,
            extra={"dag_id": draft.dag_id, "run_id": draft.run_id},
        )


def register(app: Celery) -> None:
    """Register beatflow's fire tasks on ``app``."""

    @app.task(name=FIRE_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def fire_schedule(
        self: CeleryTask,
        dag_id: str,
        logical_date: str,
        leader_epoch: int,
        trigger: str = "scheduled",
    ) -> int:
        return fire_batch(self, [[dag_id, logical_date, trigger]], leader_epoch)

    @app.task(name=FIRE_BATCH_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def fire_schedules(self: CeleryTask, fires: list[list[str]], leader_epoch: int) -> int:
        return fire_batch(self, fires, leader_epoch)

    @app.task(name=DISPATCH_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def dispatch_queued(self: CeleryTask, dag_ids: list[str]) -> int:
        return dispatch_dags(runtime_of(self.app), dag_ids)


def dispatch_dags(runtime: Runtime, dag_ids: list[str]) -> int:
    """Start and send the queued runs of each DAG its max_active_runs allows; one that cannot
    be dispatched here waits queued for the reconciler. Returns how many runs were sent."""
    from beatflow.runs.dispatch import dispatch_quietly

    sent = 0
    for dag_id in dag_ids:
        try:
            sent += dispatch_quietly(runtime, dag_id)
        except (DagNotFoundError, StoreUnavailableError) as exc:
            log.warning(
                "queued runs of DAG %s wait for the reconciler: %s", dag_id, exc,
                extra={"dag_id": dag_id},
            )  # fmt: skip
    return sent


def fire_batch(task: CeleryTask, fires: list[list[str]], leader_epoch: int) -> int:
    """Dispatch the runs of a batch of ticks, each DAG on its own: one DAG's failure never
    touches another's. Returns the number of DAGs dispatched."""
    runtime = runtime_of(task.app)
    try:
        newest = runtime.store.epoch_floor()
    except StoreUnavailableError as exc:
        raise task.retry(countdown=store_retry_delay(task.request.retries), exc=exc) from exc
    if int(leader_epoch) < newest:
        log.warning(
            "fire of %d tick(s) from beat epoch %s refused: epoch %d leads now",
            len(fires),
            leader_epoch,
            newest,
        )
        return 0
    by_dag: dict[str, list[list[str]]] = {}
    for fire in fires:
        by_dag.setdefault(fire[0], []).append(fire)
    unknown, dispatched = fire_dags(runtime, by_dag, int(leader_epoch))
    if unknown:
        retries = task.request.retries
        if retries >= UNKNOWN_DAG_RETRIES:
            log.error(
                "DAG(s) %s still not dispatched after %d tries; their runs wait queued for "
                "the reconciler (restart the workers after adding DAGs)",
                sorted({f[0] for f in unknown}),
                retries,
            )
            return dispatched
        delay = min(UNKNOWN_DAG_DELAY, store_retry_delay(retries) + 1.0)
        raise task.retry(args=[unknown, leader_epoch], countdown=delay)
    return dispatched


def fire_dags(
    runtime: Runtime, by_dag: dict[str, list[list[str]]], epoch: int
) -> tuple[list[list[str]], int]:
    """Make sure each tick's run exists (a beat older than this version did not create it),
    then start the queued runs of every DAG that is not paused and send them. A handful of
    store calls serve the whole batch (which runs exist, which DAGs are paused, the missing
    runs in one fenced insert, one dispatch for every DAG); the sends go DAG by DAG and reach
    the broker together (one round trip, their task-sent events in one message), and a failure
    that is not the whole batch's is sorted out DAG by DAG, so one DAG's failure never touches
    another's. Returns the fires to retry (unknown DAG, store down, the batch's sends lost with
    the broker) and the number of DAGs dispatched (a paused DAG counts: its runs
    wait queued)."""
    from beatflow.runs.dispatch import send_started, sending_runs

    retry: list[list[str]] = []
    ticks: dict[str, list[tuple[datetime, str]]] = {}
    for dag_id, mine in by_dag.items():
        _isolated(dag_id, mine, retry, partial(_parse, runtime, dag_id, mine, ticks))
    store = runtime.store
    try:
        keys = {(d, scheduled_run_id(t)) for d, ts in ticks.items() for t, _ in ts}
        existing = store.existing_dag_runs(keys)
        paused = store.paused_dag_ids()
    except StoreUnavailableError:
        return retry + [f for d in ticks for f in by_dag[d]], 0  # fires are idempotent
    missing = {
        dag_id: [(t, how) for t, how in dag_ticks if (dag_id, scheduled_run_id(t)) not in existing]
        for dag_id, dag_ticks in ticks.items()
    }
    ready = _create_missing(runtime, by_dag, missing, retry, epoch)
    for dag_id in ready:
        if dag_id in paused:
            log.info("DAG %s is paused: its runs wait queued", dag_id, extra={"dag_id": dag_id})
    dispatched = sum(1 for d in ready if d in paused)
    ready = [d for d in ready if d not in paused]
    try:
        started = store.start_queued_dag_runs_of(
            {dag_id: runtime.dag(dag_id).max_active_runs for dag_id in ready}
        )
    except StoreUnavailableError:
        return retry + [f for d in ready for f in by_dag[d]], dispatched
    sent: list[str] = []
    try:  # the batch's sends in one round trip to the broker, their events in one message
        with sending_runs(runtime, [(d, run.run_id) for d in ready for run in started[d]]):
            for dag_id in ready:
                send = partial(send_started, runtime, dag_id, started[dag_id])
                if _isolated(dag_id, by_dag[dag_id], retry, send):
                    sent.append(dag_id)
    except BrokerUnavailableError:  # lost with the broker: the runs are queued again
        return retry + [f for d in sent for f in by_dag[d]], dispatched
    return retry, dispatched + len(sent)


def _parse(
    runtime: Runtime,
    dag_id: str,
    fires: list[list[str]],
    into: dict[str, list[tuple[datetime, str]]],
) -> None:
    """The DAG's ticks and triggers, into ``into``, once the DAG is known to be loaded here."""
    runtime.dag(dag_id)
    into[dag_id] = [(parse_instant(when), trigger) for _, when, trigger in fires]


def _create_missing(
    runtime: Runtime,
    by_dag: dict[str, list[list[str]]],
    missing: dict[str, list[tuple[datetime, str]]],
    retry: list[list[str]],
    epoch: int,
) -> list[str]:
    """Create the runs a beat older than this version did not (one fenced call for the batch);
    returns the DAGs whose every tick has its run. A newer leader refuses them all; a store
    down retries them; anything else is sorted out DAG by DAG."""
    drafts_of: dict[str, list[ScheduledRunDraft]] = {}
    for d, ticks in missing.items():
        if ticks:
            _isolated(d, by_dag[d], retry, partial(_drafts, runtime, d, ticks, drafts_of))
    missing = {d: ticks for d, ticks in missing.items() if not ticks or d in drafts_of}
    dags = list(drafts_of)
    drafts = [x for d in dags for x in drafts_of[d]]
    try:
        create_scheduled_runs(runtime.store, drafts, epoch)
    except StaleLeaderError as exc:
        log.warning("fire of DAG(s) %s refused: %s", dags, exc)
        return [d for d in missing if d not in dags]
    except StoreUnavailableError:
        retry += [f for d in dags for f in by_dag[d]]  # fires are idempotent
        return [d for d in missing if d not in dags]
    except Exception:  # one DAG's bad run must not cost the others: one by one
        log.exception("creating %d scheduled run(s) at once failed; DAG by DAG now", len(drafts))
        created = {
            d
            for d in dags
            if _isolated(
                d,
                by_dag[d],
                retry,
                partial(create_scheduled_runs, runtime.store, drafts_of[d], epoch),
            )
        }
        return [d for d in missing if d not in dags or d in created]
    return list(missing)


def _drafts(
    runtime: Runtime,
    dag_id: str,
    ticks: list[tuple[datetime, str]],
    into: dict[str, list[ScheduledRunDraft]],
) -> None:
    dag = runtime.dag(dag_id)
    into[dag_id] = [scheduled_draft(dag, tick, how) for tick, how in ticks]


def _isolated(
    dag_id: str, fires: list[list[str]], retry: list[list[str]], work: Callable[[], object]
) -> bool:
    """Run one DAG's part of a batch; False when it failed: its fires go to ``retry`` when
    a later try may do better (DAG not loaded yet, store down), else the failure is logged and
    its runs wait queued for the reconciler."""
    try:
        work()
        return True
    except (DagNotFoundError, StoreUnavailableError, BrokerUnavailableError):
        retry += fires  # fires are idempotent (a run the broker did not take is queued again)
    except StaleLeaderError as exc:
        log.warning("fire of DAG %s refused: %s", dag_id, exc, extra={"dag_id": dag_id})
    except Exception:  # one DAG's failure must not cost the others
        log.exception(
            "dispatching the scheduled runs of DAG %s failed; they wait queued for the reconciler",
            dag_id,
            extra={"dag_id": dag_id},
        )
    return False
