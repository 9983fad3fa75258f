"""The live progress display of `beatflow dev --run`: one line per task state change."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from beatflow.store.records import TaskRunRecord

SYMBOLS = {
    "running": "▶",
    "up_for_retry": "↻",
    "cleared": "⟲",
    "up_for_reschedule": "◷",
    "success": "✓",
    "failed": "✗",
    "upstream_failed": "⊘",
    "skipped": "–",
}


def format_task_change(record: TaskRunRecord, width: int = 16) -> str:
    """``✓ extract           success          0.12s`` (plus the try or the error when useful)."""
    name = record.task_id if record.map_index < 0 else f"{record.task_id}[{record.map_index}]"
    line = f"{SYMBOLS.get(record.state, '·')} {name:<{width}} {record.state:<16}"
    if record.duration_seconds is not None:
        line += f" {record.duration_seconds:.2f}s"
    if record.try_number > 1:
        line += f"  (try {record.try_number})"
    if record.error and record.state in ("failed", "up_for_retry", "up_for_reschedule"):
        line += f"  {record.error.splitlines()[0][:120]}"
    return line.rstrip()


class TaskChangePrinter:
    """Prints a line whenever a task run's (state, try) differs from what it printed last."""

    def __init__(self, echo: Callable[[str], None], width: int = 16) -> None:
        self.echo = echo
        self.width = width
        self._seen: dict[tuple[str, int], tuple[str, int]] = {}

    def __call__(self, record: TaskRunRecord) -> None:
        key = (record.task_id, record.map_index)
        value = (record.state, record.try_number)
        if self._seen.get(key) == value:
            return
        self._seen[key] = value
        self.echo(format_task_change(record, self.width))
