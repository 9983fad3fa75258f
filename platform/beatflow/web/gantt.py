"""A run's Gantt chart: each task run as a bar on one time axis, from the run's first start to
its last end (or now, while tasks run), so the slow task and the wait between tasks show at a
glance. Pure: rows in, bars out (offsets and widths in percent of the axis)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

MIN_WIDTH = 0.4  # percent: a task of a few milliseconds still shows as a sliver


def _at(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def bars(rows: Sequence[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """``{"span": seconds, "bars": [...]}`` for the run page's rows (label, href, state,
    started_at, ended_at, duration_seconds); rows that have not started are left out, a running
    one ends at ``now``."""
    started = [(row, _at(row.get("started_at"))) for row in rows]
    timed = [(row, s, _at(row.get("ended_at")) or now) for row, s in started if s is not None]
    if not timed:
        return {"span": 0.0, "bars": []}
    first = min(s for _, s, _ in timed)
    last = max(max(e, s) for _, s, e in timed)
    span = max((last - first).total_seconds(), 1e-3)
    out = []
    for row, start, end in timed:
        offset = (start - first).total_seconds() / span * 100
        width = max((max(end, start) - start).total_seconds() / span * 100, MIN_WIDTH)
        out.append(
            {
                "label": row["label"],
                "href": row.get("href"),
                "state": row["state"],
                "offset": round(min(offset, 100 - MIN_WIDTH), 3),
                "width": round(min(width, 100 - min(offset, 100 - MIN_WIDTH)), 3),
                "seconds": (max(end, start) - start).total_seconds(),
                "running": row.get("ended_at") is None,
            }
        )
    return {"span": span, "bars": out}
