"""Plain value objects the store hands out (no SQLAlchemy in sight) and the state names.

States and trigger kinds are lower-case strings so they read the same in SQL, JSON, logs and the
CLI. Every datetime is timezone-aware UTC."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from beatflow.states import DAG_RUN_ACTIVE, DAG_RUN_FINAL, TASK_RUN_FINAL, DagRunState, TaskRunState

# DAG run and task run states: the StrEnums of beatflow.states (equal to their string values)
DAG_QUEUED = DagRunState.QUEUED
DAG_RUNNING = DagRunState.RUNNING
DAG_SUCCESS = DagRunState.SUCCESS
DAG_FAILED = DagRunState.FAILED
DAG_CANCELLED = DagRunState.CANCELLED
DAG_RUN_STATES = frozenset(DagRunState)
DAG_RUN_ACTIVE_STATES = DAG_RUN_ACTIVE
DAG_RUN_FINISHED_STATES = DAG_RUN_FINAL

TASK_RUNNING = TaskRunState.RUNNING
TASK_UP_FOR_RETRY = TaskRunState.UP_FOR_RETRY
TASK_CLEARED = TaskRunState.CLEARED
TASK_UP_FOR_RESCHEDULE = TaskRunState.UP_FOR_RESCHEDULE
TASK_SUCCESS = TaskRunState.SUCCESS
TASK_FAILED = TaskRunState.FAILED
TASK_UPSTREAM_FAILED = TaskRunState.UPSTREAM_FAILED
TASK_SKIPPED = TaskRunState.SKIPPED
TASK_CANCELLED = TaskRunState.CANCELLED
TASK_RUN_STATES = frozenset(TaskRunState)
TASK_RUN_TERMINAL_STATES = TASK_RUN_FINAL
# states of a task run that waits to be claimed again (a retry, or a clear or a replay)
TASK_RUN_WAITING_STATES = frozenset({TASK_UP_FOR_RETRY, TASK_CLEARED})
# states a running worker may finish its claimed task run with
# (skipped: the task raised beatflow.Skip)
TASK_RUN_FINISH_STATES = frozenset({TASK_SUCCESS, TASK_FAILED, TASK_UP_FOR_RETRY, TASK_SKIPPED})
# states decided without running the task (trigger rules); `failed` covers "could not even start"
TASK_RUN_DECIDED_STATES = frozenset({TASK_UPSTREAM_FAILED, TASK_SKIPPED, TASK_FAILED})

# trigger kinds
TRIGGER_SCHEDULED = "scheduled"
TRIGGER_MANUAL = "manual"
TRIGGER_CATCHUP = "catchup"
TRIGGER_BACKFILL = "backfill"
TRIGGER_REPLAY = "replay"
TRIGGERS = frozenset(
    {TRIGGER_SCHEDULED, TRIGGER_MANUAL, TRIGGER_CATCHUP, TRIGGER_BACKFILL, TRIGGER_REPLAY}
)

ClaimOutcome = Literal["run", "done", "held"]


@dataclass(frozen=True, slots=True)
class DeadLetterDraft:
    """What a dead letter keeps beyond its task run's identity and error, given to the store
    call that fails the task run for good, so the failed row and its letter are written in one
    transaction: the message's arguments, the DAG run's conf, and the tries made."""

    args: dict[str, Any]
    conf: dict[str, Any]
    tries: int


def _duration(started_at: datetime | None, ended_at: datetime | None) -> float | None:
    if started_at is None or ended_at is None:
        return None
    return (ended_at - started_at).total_seconds()


@dataclass(frozen=True, slots=True)
class DagRunRecord:
    """One DAG run as stored: identity, trigger, conf, state and timestamps."""

    dag_id: str
    run_id: str
    logical_date: datetime | None
    trigger: str
    conf: dict[str, Any]
    state: str
    queued_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    leader_epoch: int | None
    resume_count: int = 0  # times the reconciler re-sent its remaining work
    failure_reason: str | None = None  # set when the beat recorded a scheduled run as failed
    followed: bool = False  # someone follows it: its end is announced (migration 0013)

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from start to end, None until the run has both."""
        return _duration(self.started_at, self.ended_at)


# DAG runs per multi-row INSERT: about a dozen bind parameters a run keeps one statement far
# under PostgreSQL's 65,535 and SQLite's 32,766
INSERT_CHUNK = 500


@dataclass(frozen=True, slots=True)
class ScheduledRunDraft:
    """A scheduled DAG run to create (behind the leader-epoch fence for the beat's, without it
    for a backfill's): queued, or failed with ``failure_reason`` when it cannot run (a
    required param without a default)."""

    dag_id: str
    run_id: str
    logical_date: datetime
    trigger: str
    conf: dict[str, Any] | None
    failure_reason: str | None = None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What ``finish_and_close`` did: whether the task run's success was ``written`` (False:
    its lease was taken over, nothing written), the DAG run as this call ``closed`` it (None:
    not written, or the run had ended already), and the waiting runs it ``started`` (oldest
    first), which the caller sends."""

    written: bool
    closed: DagRunRecord | None = None
    started: tuple[DagRunRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskRunEnded:
    """What ending a task run did: whether it was ``written`` (False: a lease taken over, a
    row already final; the object is falsy then) and, for a .map() instance that was its
    expansion's last to end, ``fan_in``: what follows the expander in its canvas (Celery
    request fields), for the caller to send."""

    written: bool
    fan_in: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return self.written


@dataclass(frozen=True, slots=True)
class TriggeredRun:
    """What creating a DAG run and dispatching its DAG in one transaction did: ``run`` as it
    stands afterwards, whether this call ``created`` it, and every run the dispatch
    ``started`` (oldest logical date first; ``run`` among them when it was started), which the
    caller sends."""

    run: DagRunRecord
    created: bool
    started: tuple[DagRunRecord, ...]


@dataclass(frozen=True, slots=True)
class AuditNote:
    """An operator's verb to record with the change it makes, in the same transaction: who
    (``actor``: a user, a token, ``cli:<os user>``), what (``action``) and its ``detail``."""

    actor: str
    action: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TaskRunRecord:
    """One task run (the latest try of one dedupe key): state, lease, result or error."""

    dedupe_key: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str
    try_number: int
    worker: str | None
    celery_task_id: str | None
    lease_expires_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    result: Any
    error: str | None
    traceback: str | None
    map_count: int | None = None  # a .map() task's instance count, once it expanded
    deduped_from: str | None = None  # the run that did it (a dedupe key shared across runs)
    # tries made before the last clear or replay: the retry policy counts the tries after them
    tries_before: int = 0

    @property
    def tries_since_clear(self) -> int:
        """The tries of the current round (all of them when it was never cleared)."""
        return max(0, self.try_number - self.tries_before)

    @property
    def try_text(self) -> str:
        """The try as the CLI and the pages write it: ``-`` for one that never ran, ``next 4``
        for a cleared one (its next try), ``6 (3 since clear)`` after a clear or a replay."""
        if self.state == TaskRunState.CLEARED:
            return f"next {self.try_number + 1}"
        if self.try_number == 0:
            return "-"
        if self.tries_before:
            return f"{self.try_number} ({self.tries_since_clear} since clear)"
        return str(self.try_number)

    @property
    def duration_seconds(self) -> float | None:
        """Seconds the latest try ran, None until it has ended."""
        return _duration(self.started_at, self.ended_at)


@dataclass(frozen=True, slots=True)
class Claim:
    """What claiming a dedupe key decided.

    ``run``: this caller holds the lease (``token``) and must run the task, then finish it;
    ``done``: the task run is already terminal, ``record`` holds its result or error;
    ``held``: another live worker holds the lease (``record.worker``): retry later.
    """

    outcome: ClaimOutcome
    record: TaskRunRecord
    token: str | None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One operator action: who did what to which DAG or run, when, with what detail."""

    id: int
    at: datetime
    actor: str
    action: str
    dag_id: str | None
    run_id: str | None
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """A task run that exhausted its retries, with what it takes to replay it."""

    id: int
    dedupe_key: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    args: dict[str, Any]
    conf: dict[str, Any]
    error: str
    traceback: str | None
    tries: int
    created_at: datetime
    replayed_at: datetime | None
    # closed without a replay (its run was marked, its task cleared, a newer letter): stale
    closed_at: datetime | None = None
    closed_reason: str | None = None

    @property
    def is_open(self) -> bool:
        """Neither replayed nor closed: a replay may run it."""
        return self.replayed_at is None and self.closed_at is None


@dataclass(frozen=True, slots=True)
class SensorPokes:
    """The pokes of one try of a sensor task run in reschedule mode."""

    dedupe_key: str
    task_id: str
    map_index: int
    try_number: int
    poke_count: int
    first_poke_at: datetime
    next_poke_at: datetime
