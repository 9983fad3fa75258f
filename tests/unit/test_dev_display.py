"""The live display of `beatflow dev --run`: one line per task state change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beatflow.dev.display import TaskChangePrinter, format_task_change
from beatflow.store.records import TaskRunRecord

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _record(
    task_id: str,
    state: str,
    *,
    seconds: float | None = None,
    try_number: int = 1,
    error: str | None = None,
    map_index: int = -1,
) -> TaskRunRecord:
    return TaskRunRecord(
        dedupe_key=f"etl/r1/{task_id}",
        dag_id="etl",
        run_id="r1",
        task_id=task_id,
        map_index=map_index,
        state=state,
        try_number=try_number,
        worker=None,
        celery_task_id=None,
        lease_expires_at=None,
        started_at=T0,
        ended_at=None if seconds is None else T0 + timedelta(seconds=seconds),
        result=None,
        error=error,
        traceback=None,
    )


def test_a_finished_task_shows_a_tick_its_state_and_its_duration() -> None:
    line = format_task_change(_record("extract", "success", seconds=0.123))
    assert line.split() == ["✓", "extract", "success", "0.12s"]


def test_a_retry_shows_the_try_and_the_first_line_of_the_error() -> None:
    line = format_task_change(
        _record("load", "up_for_retry", seconds=1.5, try_number=2, error="IOError: disk\nmore")
    )
    assert line.startswith("↻ load")
    assert "(try 2)" in line and line.endswith("IOError: disk")


def test_mapped_tasks_show_their_index_and_undecided_ones_no_duration() -> None:
    assert format_task_change(_record("fan", "running", map_index=3)).split() == [
        "▶",
        "fan[3]",
        "running",
    ]
    assert format_task_change(_record("publish", "upstream_failed")).startswith("⊘ publish")


def test_the_printer_prints_each_state_change_once() -> None:
    lines: list[str] = []
    printer = TaskChangePrinter(lines.append)

    for record in (
        _record("extract", "running"),
        _record("extract", "running"),
        _record("extract", "success", seconds=0.5),
        _record("extract", "success", seconds=0.5),
    ):
        printer(record)

    assert [line.split()[:3] for line in lines] == [
        ["▶", "extract", "running"],
        ["✓", "extract", "success"],
    ]
