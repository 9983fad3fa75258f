"""Store contract, a sensor's pokes: a claimed try ends up_for_reschedule with its pokes in one
write under its lease; the next claim takes it over as the same try (a reschedule consumes no
retry); a stale token writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beatflow.store import SensorPokes, Store
from tests.integration.store.test_task_runs_contract import KEY, claim


def pokes(n: int, try_number: int = 1) -> SensorPokes:
    first = datetime(2026, 12, 6, 7, 0, tzinfo=UTC)
    return SensorPokes(
        dedupe_key=KEY,
        task_id="load",
        map_index=-1,
        try_number=try_number,
        poke_count=n,
        first_poke_at=first,
        next_poke_at=first + timedelta(seconds=30 * n),
    )


def test_a_reschedule_records_its_pokes_and_the_next_claim_keeps_the_try(store: Store) -> None:
    first = claim(store)
    assert first.token is not None
    assert store.sensor_pokes(KEY) is None
    assert store.reschedule_task_run(KEY, first.token, pokes(1), note="poke 1 not done")
    row = store.get_task_run(KEY)
    assert row is not None
    assert (row.state, row.try_number, row.error) == ("up_for_reschedule", 1, "poke 1 not done")
    assert store.sensor_pokes(KEY) == pokes(1)
    assert store.sensor_pokes_of_run("etl", "r1") == [pokes(1)]

    second = claim(store, worker="w2")
    assert second.outcome == "run" and second.token is not None
    assert (second.record.state, second.record.try_number) == ("running", 1)
    assert store.reschedule_task_run(KEY, second.token, pokes(2))
    assert store.sensor_pokes(KEY) == pokes(2)  # updated in place, one row per task run

    # a retry (up_for_retry) still starts a new try
    third = claim(store, worker="w3")
    assert third.token is not None
    assert store.finish_task_run(KEY, third.token, state="up_for_retry", error="boom")
    assert claim(store, worker="w4").record.try_number == 2


def test_a_stale_token_cannot_reschedule(store: Store) -> None:
    first = claim(store)
    assert first.token is not None
    assert not store.reschedule_task_run(KEY, "not-the-token", pokes(1))
    assert store.get_task_run(KEY).state == "running"
    assert store.sensor_pokes(KEY) is None
    assert store.finish_task_run(KEY, first.token, state="success", result=1)
    assert not store.reschedule_task_run(KEY, first.token, pokes(1))
    assert store.get_task_run(KEY).state == "success"
