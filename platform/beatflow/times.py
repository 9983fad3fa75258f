"""Time helpers shared by every layer: instants are timezone-aware and compared in UTC; a naive
datetime (from a user, an ISO string without an offset) is read in a stated zone, UTC unless
told otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo


def utc_now() -> datetime:
    """The local clock, in UTC, timezone-aware."""
    return datetime.now(UTC)


def as_utc(value: datetime, assume: tzinfo = UTC) -> datetime:
    """``value`` in UTC; a naive ``value`` is read as a wall time in ``assume``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=assume)
    return value.astimezone(UTC)


def parse_instant(text: str, assume: tzinfo = UTC) -> datetime:
    """An ISO 8601 date or date-time as a UTC instant (ValueError when it is not one); one
    without an offset is read in ``assume``."""
    return as_utc(datetime.fromisoformat(text), assume)
