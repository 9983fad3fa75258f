"""Cron ticks across DST changes against literal UTC instants worked out by hand (no production
helper as oracle). Policy: a wall time that does not exist (spring forward) fires once, shifted
forward by the gap; a wall time that happens twice (fall back) fires once, at its first
occurrence. Zones: New York, Sydney, Adelaide (a 30-minute offset, +09:30/+10:30)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from beatflow.dag.schedule import Schedule


def z(y: int, mo: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


CASES = [
    # New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 runs at 03:30 EDT
    (
        "America/New_York",
        "30 2 * * *",
        z(2026, 3, 6, 12),
        z(2026, 3, 9, 12),
        [z(2026, 3, 7, 7, 30), z(2026, 3, 8, 7, 30), z(2026, 3, 9, 6, 30)],
    ),
    # New York, fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice, runs once
    (
        "America/New_York",
        "30 1 * * *",
        z(2026, 10, 30, 12),
        z(2026, 11, 2, 12),
        [z(2026, 10, 31, 5, 30), z(2026, 11, 1, 5, 30), z(2026, 11, 2, 6, 30)],
    ),
    # New York, the fall-back hour with an hourly job: the repeated 01:00 hour runs once
    (
        "America/New_York",
        "0 * * * *",
        z(2026, 11, 1, 3, 30),
        z(2026, 11, 1, 7, 30),
        [z(2026, 11, 1, 4), z(2026, 11, 1, 5), z(2026, 11, 1, 7)],
    ),
    # Sydney, spring forward 2026-10-04 02:00 AEST -> 03:00 AEDT
    (
        "Australia/Sydney",
        "30 2 * * *",
        z(2026, 10, 2, 0),
        z(2026, 10, 5, 0),
        [z(2026, 10, 2, 16, 30), z(2026, 10, 3, 16, 30), z(2026, 10, 4, 15, 30)],
    ),
    # Sydney, fall back 2026-04-05 03:00 AEDT -> 02:00 AEST: 02:30 at its first (AEDT) time
    (
        "Australia/Sydney",
        "30 2 * * *",
        z(2026, 4, 3, 0),
        z(2026, 4, 6, 0),
        [z(2026, 4, 3, 15, 30), z(2026, 4, 4, 15, 30), z(2026, 4, 5, 16, 30)],
    ),
    # Adelaide (+09:30 / +10:30), spring forward 2026-10-04 02:00 ACST -> 03:00 ACDT
    (
        "Australia/Adelaide",
        "30 2 * * *",
        z(2026, 10, 2, 0),
        z(2026, 10, 5, 0),
        [z(2026, 10, 2, 17), z(2026, 10, 3, 17), z(2026, 10, 4, 16)],
    ),
    # Adelaide, fall back 2026-04-05 03:00 ACDT -> 02:00 ACST
    (
        "Australia/Adelaide",
        "30 2 * * *",
        z(2026, 4, 3, 0),
        z(2026, 4, 6, 0),
        [z(2026, 4, 3, 16), z(2026, 4, 4, 16), z(2026, 4, 5, 17)],
    ),
    # Kolkata (+05:30, no DST): 09:00 local is 03:30 UTC every day
    (
        "Asia/Kolkata",
        "0 9 * * *",
        z(2026, 3, 7, 0),
        z(2026, 3, 9, 12),
        [z(2026, 3, 7, 3, 30), z(2026, 3, 8, 3, 30), z(2026, 3, 9, 3, 30)],
    ),
]


@pytest.mark.parametrize(("zone", "cron", "after", "until", "expected"), CASES)
def test_cron_ticks_across_dst_are_the_literal_instants(
    zone: str, cron: str, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    schedule = Schedule.parse(cron, ZoneInfo(zone))
    assert list(schedule.ticks(after, until)) == expected
    # and walking back from the end finds the same ticks
    assert schedule.prev_at_or_before(until) == expected[-1]
    assert schedule.next_after(expected[0]) == expected[1]
