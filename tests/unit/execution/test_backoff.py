"""A retry's wait past the broker's limits: the capped countdown, the due time read from the
task run's row (the same for every message and for the reconciler), and the decision to wait
again without a claim when a message arrives before its retry is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from beatflow.dag.model import DAG, RetryPolicy, TaskSpec
from beatflow.execution.backoff import (
    COUNTDOWN_MAX_SECONDS,
    countdown,
    early_by,
    retry_delay,
    retry_due,
    retry_jitter,
)
from beatflow.runs.reconciler import _retry_pending
from beatflow.store import TaskRunRecord

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
FAR = RetryPolicy(retries=2, delay=3600.0, max_delay=7200.0, jitter=False)


def _row(state: str = "up_for_retry", *, try_number: int = 1, ended: datetime | None = T0,
         tries_before: int = 0) -> TaskRunRecord:  # fmt: skip
    return TaskRunRecord(
        dedupe_key="etl/r1/load",
        dag_id="etl",
        run_id="r1",
        task_id="load",
        map_index=-1,
        state=state,
        try_number=try_number,
        worker=None,
        celery_task_id=None,
        lease_expires_at=None,
        started_at=T0 - timedelta(seconds=1),
        ended_at=ended,
        result=None,
        error="boom",
        traceback=None,
        tries_before=tries_before,
    )


@pytest.mark.parametrize(
    ("due", "visibility_timeout", "cap", "expected"),
    [
        (30.0, 3600, COUNTDOWN_MAX_SECONDS, 30.0),  # a short wait: as it is
        (3600.0, 3600, COUNTDOWN_MAX_SECONDS, 900.0),  # an hour: in countdowns of 900 s
        (3600.0, 600, COUNTDOWN_MAX_SECONDS, 300.0),  # a short visibility timeout caps it lower
        (7.0, 3600, 2.0, 2.0),  # BEATFLOW_MAX_COUNTDOWN_SECONDS
        (-2.0, 3600, COUNTDOWN_MAX_SECONDS, 0.0),  # overdue: at once
    ],
)
def test_a_countdown_is_capped_below_the_brokers_limits(due, visibility_timeout, cap, expected):
    assert countdown(due, visibility_timeout, cap) == expected


def test_a_retrys_due_time_is_its_failed_trys_end_plus_its_backoff() -> None:
    assert retry_due(_row(), FAR) == T0 + timedelta(hours=1)
    assert retry_due(_row(try_number=2), FAR) == T0 + timedelta(hours=2)  # backoff 2x
    # after a clear, the policy counts from the clear: the first try of the round again
    assert retry_due(_row(try_number=4, tries_before=3), FAR) == T0 + timedelta(hours=1)


@pytest.mark.parametrize(
    "row",
    [
        _row("running"),
        _row("success"),
        _row(ended=None),
        _row(try_number=3, tries_before=3),  # put back by a replay: runs at once
    ],
)
def test_nothing_holds_back_a_row_that_waits_for_no_retry(row: TaskRunRecord) -> None:
    assert retry_due(row, FAR) is None


def test_the_jitter_is_the_task_runs_own_and_the_same_for_every_reader() -> None:
    policy = RetryPolicy(retries=3, delay=10.0, jitter=True)
    draws = {retry_jitter(f"etl/r{i}/load", 1) for i in range(50)}
    assert len(draws) == 50 and all(0 <= d < 1 for d in draws)  # spread across task runs
    first = retry_delay(policy, "etl/r1/load", 1, 1)
    assert first == retry_delay(policy, "etl/r1/load", 1, 1)
    assert 5.0 <= first <= 10.0
    row = _row()
    assert retry_due(row, policy) == T0 + timedelta(seconds=first)


def test_a_message_before_its_retry_is_due_waits_again_and_one_on_time_runs() -> None:
    due = retry_due(_row(), FAR)
    assert early_by(due, T0) == 3600.0  # the first capped countdown: wait again
    assert early_by(due, due - timedelta(seconds=0.2)) == 0.0  # within the tolerance: runs
    assert early_by(due, due + timedelta(seconds=5)) == 0.0  # late: runs
    assert early_by(None, T0) == 0.0  # no retry pending: the claim decides as before
    # the waits a long retry is made of: each capped, until it is due
    waits, now = [], T0
    while early := early_by(due, now):
        waits.append(countdown(early, 3600, COUNTDOWN_MAX_SECONDS))
        now += timedelta(seconds=waits[-1])
    assert waits == [900.0, 900.0, 900.0, 900.0] and now == due


def _etl() -> DAG:
    dag = DAG("etl")
    dag.add_task(TaskSpec(task_id="load", fn=lambda: None, retry=FAR))
    return dag


def test_the_reconciler_counts_a_far_retry_as_waiting_not_as_a_lost_canvas() -> None:
    stall = timedelta(seconds=60)
    now = datetime.now(UTC)
    waiting = _row(ended=now - timedelta(seconds=5))  # due in about an hour
    assert _retry_pending(_etl(), [waiting], stall)
    lost = _row(ended=now - timedelta(hours=1, minutes=2))  # due a minute ago, past the stall
    assert not _retry_pending(_etl(), [lost], stall)
