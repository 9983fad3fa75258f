"""A run's announced end: what a follower accepts as the run without reading it back, and what
it refuses (then it reads the results DB)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from beatflow.execution.announce import ENDED, ended_run
from beatflow.store import DagRunRecord

WHEN = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def _fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "dag_id": "etl",
        "run_id": "manual__1",
        "logical_date": WHEN.isoformat(),
        "trigger": "manual",
        "conf": {"n": 1},
        "state": "success",
        "queued_at": WHEN.isoformat(),
        "started_at": WHEN.isoformat(),
        "ended_at": WHEN.replace(second=3).isoformat(),
        "leader_epoch": None,
        "resume_count": 0,
        "failure_reason": None,
        "followed": True,
    }
    return {**fields, **overrides}


def _message(**overrides: object) -> str:
    return f"{ENDED} {json.dumps(_fields(**overrides))}"


def test_the_run_an_end_carries_comes_back_whole() -> None:
    record = ended_run(_message(), "etl", "manual__1")
    assert record == DagRunRecord(
        dag_id="etl",
        run_id="manual__1",
        logical_date=WHEN,
        trigger="manual",
        conf={"n": 1},
        state="success",
        queued_at=WHEN,
        started_at=WHEN,
        ended_at=WHEN.replace(second=3),
        leader_epoch=None,
        followed=True,
    )
    assert record.duration_seconds == 3.0


@pytest.mark.parametrize(
    "data",
    [
        _message(run_id="manual__2"),  # another run's (a channel shared by mistake)
        _message(state="running"),  # not an end
        _message(ended_at=None),
        _message(conf=[1]),
        _message(logical_date="yesterday"),
        _message(unknown=1),
        f"{ENDED} {{not json",
        f"{ENDED} []",
        f"{ENDED} {json.dumps({'dag_id': 'etl'})}",  # fields missing
        "run",
    ],
)
def test_anything_else_is_refused_and_the_follower_reads(data: str) -> None:
    assert ended_run(data, "etl", "manual__1") is None
