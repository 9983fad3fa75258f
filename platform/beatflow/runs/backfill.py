"""Backfill: create the DAG runs of a past range of ticks (``beatflow dags backfill``, the API and
the UI). The run id derives from the tick exactly as a scheduled fire's does, so backfilling
twice, or over ticks the beat already fired, makes no second run.

A backfill is planned first (``plan_backfill``): one entry per tick, ``create`` for a tick
without a run, ``rerun`` for an ended run that ``reprocess`` asks to run again (``failed``: the
failed runs, their failed task runs cleared; ``all``: the successful ones too, every task run
cleared); runs still queued or running are left alone. A dry run returns the plan and writes
nothing. Otherwise the plan is recorded as a backfill (its id, ``store.create_backfill``,
audited) and released at most ``max_active_runs`` runs at a time: entries not yet released are
not runs, so the cap holds whatever else dispatches the DAG (whose own max_active_runs still
applies). The backfill's own call and every reconciler pass release more as its runs end
(``advance_backfill``, a compare-and-set on the released count); cancelling a backfill stops
the releases and cancels its queued and running runs."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from beatflow.errors import BeatflowError, RunStateError, SchedulerError
from beatflow.runs.dispatch import send_started
from beatflow.runs.fire import scheduled_run_id
from beatflow.runtime import Runtime
from beatflow.states import DAG_RUN_ACTIVE, DagRunState
from beatflow.store.backfills import BACKFILL_CANCELLED, BACKFILL_DONE, BackfillRecord
from beatflow.store.records import AuditNote, ScheduledRunDraft
from beatflow.times import as_utc

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord

log = logging.getLogger(__name__)

MAX_BACKFILL_TICKS = 10_000
REPROCESS = ("none", "failed", "all")


def backfill_ticks(runtime: Runtime, dag_id: str, start: datetime, end: datetime) -> list[datetime]:
    """The ticks of ``dag_id`` in ``[start, end]``, inside its start_date/end_date, oldest first.
    ``end`` is clamped to now: a future tick is the beat's to fire, not a backfill's."""
    dag = runtime.dag(dag_id)
    if dag.schedule is None:
        raise SchedulerError(
            f'DAG "{dag_id}" has no schedule, so it has no ticks to backfill; '
            f"use `beatflow dags trigger {dag_id}` for a manual run"
        )
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise SchedulerError(
            f"backfill of {dag_id}: --end {end.isoformat()} is before --start {start.isoformat()}"
        )
    if dag.start_date is not None:
        start = max(start, dag.start_date)
    if dag.end_date is not None:
        end = min(end, dag.end_date)
    end = min(end, datetime.now(UTC))
    ticks: list[datetime] = []
    first = dag.schedule.prev_at_or_before(start)
    if first is not None and first >= start:
        ticks.append(first)
    for tick in dag.schedule.ticks(start, end):
        ticks.append(tick)
        if len(ticks) > MAX_BACKFILL_TICKS:
            raise SchedulerError(
                f"backfill of {dag_id} from {start.isoformat()} to {end.isoformat()} covers more "
                f"than {MAX_BACKFILL_TICKS} ticks; split it into smaller ranges"
            )
    return ticks


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """What a backfill did: its ``plan`` (what a dry run would do), the ``backfill`` recorded
    (None for a dry run) and its ``runs`` released so far, oldest first."""

    plan: list[dict[str, Any]]
    backfill: BackfillRecord | None = None
    runs: list[DagRunRecord] = field(default_factory=list)


def plan_backfill(
    runtime: Runtime, dag_id: str, start: datetime, end: datetime, reprocess: str = "none"
) -> list[dict[str, Any]]:
    """The entries of a backfill of ``dag_id`` over ``[start, end]``, oldest first: ``create``
    for a tick without a run, ``rerun`` for an ended run ``reprocess`` asks to run again."""
    if reprocess not in REPROCESS:
        raise SchedulerError(
            f"backfill of {dag_id}: reprocess must be one of {', '.join(REPROCESS)}, "
            f"not {reprocess!r}"
        )
    ticks = backfill_ticks(runtime, dag_id, start, end)
    run_ids = [scheduled_run_id(tick) for tick in ticks]
    states = runtime.store.dag_run_states(dag_id, run_ids)
    rerun = {"none": set(), "failed": {DagRunState.FAILED}, "all": set(DagRunState)}[reprocess]
    plan: list[dict[str, Any]] = []
    for tick, run_id in zip(ticks, run_ids, strict=True):
        state = states.get(run_id)
        entry = {"run_id": run_id, "logical_date": tick.isoformat(), "state": state}
        if state is None:
            plan.append({**entry, "action": "create"})
        elif state not in DAG_RUN_ACTIVE and state in rerun:
            plan.append({**entry, "action": "rerun"})
    return plan


def start_backfill(
    runtime: Runtime,
    dag_id: str,
    start: datetime,
    end: datetime,
    *,
    reprocess: str = "none",
    max_active_runs: int | None = None,
    conf: dict[str, Any] | None = None,
    dry_run: bool = False,
    actor: str = "beatflow",
    reason: str = "",
) -> BackfillResult:
    """Plan a backfill; unless ``dry_run``, record it (audited) and release its first runs.
    ``max_active_runs``: at most that many of its runs queued or running at once (None: all
    at once, queued behind the DAG's own max_active_runs). A conf the DAG refuses, a bad
    range or ``reprocess`` raise before anything is written."""
    dag = runtime.dag(dag_id)
    if max_active_runs is not None and max_active_runs < 1:
        raise SchedulerError(f"backfill of {dag_id}: max_active_runs must be at least 1")
    resolved = dag.resolve_conf(conf)
    plan = plan_backfill(runtime, dag_id, start, end, reprocess)
    if dry_run:
        return BackfillResult(plan)
    detail = {
        "start": as_utc(start).isoformat(),
        "end": as_utc(end).isoformat(),
        "reprocess": reprocess,
        "max_active_runs": max_active_runs,
        "reason": reason,
    }
    record = runtime.store.create_backfill(
        dag_id,
        start=as_utc(start),
        end=as_utc(end),
        reprocess=reprocess,
        max_active_runs=max_active_runs or max(len(plan), 1),
        conf=resolved,
        plan=plan,
        audit=AuditNote(actor, "backfill", detail),
    )
    log.info(
        "backfill %d of %s: %d runs planned (reprocess %s)",
        record.id,
        dag_id,
        len(plan),
        reprocess,
        extra={"dag_id": dag_id},
    )
    advance_backfill(runtime, record)
    current = runtime.store.get_backfill(record.id) or record
    return BackfillResult(plan, current, _released_runs(runtime, current))


def advance_backfill(runtime: Runtime, record: BackfillRecord) -> int:
    """Release the backfill's next entries while fewer than its max_active_runs of its runs
    are queued or running, and end it (done) once every entry is released and ended. The
    number of entries released. Safe to call anywhere, any number of times at once."""
    released = record.plan[: record.released]
    states = runtime.store.dag_run_states(record.dag_id, [e["run_id"] for e in released])
    active = sum(1 for e in released if states.get(e["run_id"]) in DAG_RUN_ACTIVE)
    if record.released >= len(record.plan):
        if active == 0:
            runtime.store.end_backfill(record.id, to=BACKFILL_DONE)
        return 0
    free = record.max_active_runs - active
    if free <= 0:
        return 0
    to = min(len(record.plan), record.released + free)
    if not runtime.store.release_backfill(record.id, seen=record.released, to=to):
        return 0  # another caller released them, or the backfill was cancelled
    entries = record.plan[record.released : to]
    drafts = [
        ScheduledRunDraft(
            record.dag_id,
            e["run_id"],
            datetime.fromisoformat(e["logical_date"]),
            "backfill",
            record.conf,
        )
        for e in entries
        if e["action"] == "create"
    ]
    runtime.store.create_dag_runs(drafts)
    for e in entries:
        if e["action"] == "rerun":
            _rerun(runtime, record, e)
    dag = runtime.dag(record.dag_id)
    started = runtime.store.start_queued_dag_runs(record.dag_id, dag.max_active_runs)
    send_started(runtime, record.dag_id, started)
    return len(entries)


def _rerun(runtime: Runtime, record: BackfillRecord, entry: dict[str, Any]) -> None:
    from beatflow.runs.operator import clear_run

    try:
        clear_run(
            runtime,
            record.dag_id,
            entry["run_id"],
            only_failed=entry["state"] == DagRunState.FAILED,
            actor=record.actor,
            reason=f"backfill {record.id}: {record.reason}".rstrip(": "),
        )
    except BeatflowError as exc:  # the run changed since the plan: leave it as it is
        log.warning("backfill %d: run %s not re-run: %s", record.id, entry["run_id"], exc)


def cancel_backfill(
    runtime: Runtime, backfill_id: int, *, actor: str, reason: str = ""
) -> BackfillRecord:
    """Stop releasing the backfill's runs and cancel those queued or running (each audited as
    a cancel, the backfill's cancel audited too). RunStateError when it has ended already."""
    from beatflow.runs.operator import cancel_run

    record = get_backfill(runtime, backfill_id)
    note = AuditNote(actor, "backfill_cancel", {"reason": reason})
    ended = runtime.store.end_backfill(backfill_id, to=BACKFILL_CANCELLED, audit=note)
    if ended is None:
        current = get_backfill(runtime, backfill_id)
        raise RunStateError(
            record.dag_id, f"backfill {backfill_id}", current.state, "cancel", "it has ended"
        )
    released = ended.plan[: ended.released]
    states = runtime.store.dag_run_states(ended.dag_id, [e["run_id"] for e in released])
    for e in released:
        if states.get(e["run_id"]) in DAG_RUN_ACTIVE:
            with contextlib.suppress(RunStateError):  # it ended meanwhile
                cancel_run(
                    runtime,
                    ended.dag_id,
                    e["run_id"],
                    actor=actor,
                    reason=f"backfill {backfill_id} cancelled: {reason}".rstrip(": "),
                )
    return ended


def get_backfill(runtime: Runtime, backfill_id: int) -> BackfillRecord:
    record = runtime.store.get_backfill(backfill_id)
    if record is None:
        raise BackfillNotFoundError(f"no backfill {backfill_id}")
    return record


class BackfillNotFoundError(SchedulerError):
    """No backfill has that id."""


def backfill_progress(runtime: Runtime, record: BackfillRecord) -> dict[str, int]:
    """How many of the backfill's runs are in each state; ``pending`` for entries not yet
    released (and ``skipped`` for those a cancel left unreleased)."""
    counts: dict[str, int] = {}
    released = record.plan[: record.released]
    states = runtime.store.dag_run_states(record.dag_id, [e["run_id"] for e in released])
    for e in released:
        state = states.get(e["run_id"], "missing")
        counts[state] = counts.get(state, 0) + 1
    left = len(record.plan) - record.released
    if left:
        counts["skipped" if record.state == BACKFILL_CANCELLED else "pending"] = left
    return counts


def _released_runs(runtime: Runtime, record: BackfillRecord) -> list[DagRunRecord]:
    ids = [e["run_id"] for e in record.plan[: record.released]]
    found = runtime.store.get_dag_runs(record.dag_id, ids)
    return [found[run_id] for run_id in ids if run_id in found]


def backfill(
    runtime: Runtime,
    dag_id: str,
    start: datetime,
    end: datetime,
    *,
    actor: str | None = None,
    reason: str = "",
) -> list[DagRunRecord]:
    """Create (or find) one DAG run per tick in ``[start, end]``, all at once (extra runs
    beyond the DAG's max_active_runs wait queued). Returns the runs, oldest first, those that
    existed included."""
    start_backfill(runtime, dag_id, start, end, actor=actor or "beatflow", reason=reason)
    ids = [scheduled_run_id(tick) for tick in backfill_ticks(runtime, dag_id, start, end)]
    found = runtime.store.get_dag_runs(dag_id, ids)
    return [found[run_id] for run_id in ids if run_id in found]
