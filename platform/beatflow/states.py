"""The one vocabulary of states: DAG run and task run states as ``StrEnum``s (their values are
what the database, JSON, logs and the CLI show), with the groups the rest of the code asks about.

A DAG run moves ``queued -> running -> success | failed | cancelled``; a task run
``running <-> up_for_retry -> success | failed | upstream_failed | skipped | cancelled``, and a
final one ``-> cleared -> running`` when an operator clears it or replays its dead letter: it
runs again as new tries with its full retry policy; a sensor in reschedule mode also moves
``running <-> up_for_reschedule`` between its pokes."""

from __future__ import annotations

from enum import StrEnum


class DagRunState(StrEnum):
    """The state of one DAG run."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in DAG_RUN_FINAL


class TaskRunState(StrEnum):
    """The state of one task run (the latest try of one dedupe key)."""

    RUNNING = "running"
    UP_FOR_RETRY = "up_for_retry"
    # cleared or replayed by an operator: waits to run again, its retries counted afresh
    CLEARED = "cleared"
    UP_FOR_RESCHEDULE = "up_for_reschedule"  # a sensor between pokes (its slot is free)
    SUCCESS = "success"
    FAILED = "failed"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in TASK_RUN_FINAL


DAG_RUN_ACTIVE = frozenset({DagRunState.QUEUED, DagRunState.RUNNING})
DAG_RUN_FINAL = frozenset({DagRunState.SUCCESS, DagRunState.FAILED, DagRunState.CANCELLED})

TASK_RUN_FINAL = frozenset(
    {
        TaskRunState.SUCCESS,
        TaskRunState.FAILED,
        TaskRunState.UPSTREAM_FAILED,
        TaskRunState.SKIPPED,
        TaskRunState.CANCELLED,
    }
)
# final states that count as a failure of the DAG run
TASK_RUN_FAILED = frozenset(
    {TaskRunState.FAILED, TaskRunState.UPSTREAM_FAILED, TaskRunState.CANCELLED}
)
