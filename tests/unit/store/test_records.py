"""Store records: durations, immutability, the state vocabulary."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from beatflow.store import DagRunRecord, TaskRunRecord, records

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def dag_run(**changes: object) -> DagRunRecord:
    base = DagRunRecord(
        dag_id="etl",
        run_id="r",
        logical_date=None,
        trigger="manual",
        conf={},
        state="running",
        queued_at=T0,
        started_at=T0,
        ended_at=None,
        leader_epoch=None,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def task_run(**changes: object) -> TaskRunRecord:
    base = TaskRunRecord(
        dedupe_key="etl/r/t",
        dag_id="etl",
        run_id="r",
        task_id="t",
        map_index=-1,
        state="running",
        try_number=1,
        worker=None,
        celery_task_id=None,
        lease_expires_at=None,
        started_at=T0,
        ended_at=None,
        result=None,
        error=None,
        traceback=None,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_durations_are_none_until_a_run_has_ended() -> None:
    assert dag_run().duration_seconds is None
    assert task_run().duration_seconds is None
    assert dag_run(started_at=None, ended_at=T0).duration_seconds is None


def test_durations_are_seconds_from_start_to_end() -> None:
    end = T0 + timedelta(seconds=2.5)
    assert dag_run(ended_at=end).duration_seconds == 2.5
    assert task_run(ended_at=end).duration_seconds == 2.5


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        dag_run().state = "success"  # type: ignore[misc]


def test_terminal_task_states_are_the_ones_a_claim_reports_as_done() -> None:
    terminal, every = records.TASK_RUN_TERMINAL_STATES, records.TASK_RUN_STATES
    assert terminal == {"success", "failed", "upstream_failed", "skipped", "cancelled"}
    assert every - terminal == {"running", "up_for_retry", "cleared", "up_for_reschedule"}
    triggers = records.TRIGGERS
    assert triggers == {"scheduled", "manual", "catchup", "backfill", "replay"}
