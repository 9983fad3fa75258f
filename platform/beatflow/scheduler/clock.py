"""The beat's clock: wall-clock UTC, optionally shifted by an offset read from a file (tests set
``BEATFLOW_TEST_CLOCK_FILE`` to move a running beat through time: outages, DST nights)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path


class Clock:
    """``now()`` is UTC wall time plus the number of seconds in ``offset_file`` (if given)."""

    def __init__(self, offset_file: str = "") -> None:
        self.offset_file = Path(offset_file) if offset_file else None

    def offset(self) -> timedelta:
        if self.offset_file is None:
            return timedelta(0)
        try:
            return timedelta(seconds=float(self.offset_file.read_text().strip() or 0))
        except (OSError, ValueError):
            return timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset()
