"""The chaos run's invariants on a real PostgreSQL: each check passes on a clean record and fails
on the very fault it exists to catch (a missing or doubled tick, a run left running, an effect
run twice, a failed task without its dead letter, a slot exceeded)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from beatflow.chaos import checks
from beatflow.chaos.workload import SCHEDULED, create_ledger
from beatflow.store import Store

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
STOP = START + timedelta(seconds=30)


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    store = Store(postgres_url)
    store.upgrade()
    store.close()
    engine = sa.create_engine(postgres_url)
    create_ledger(engine)
    yield engine
    engine.dispose()


def add_run(engine: sa.Engine, dag_id: str, logical: datetime, state: str = "success",
            trigger: str = "scheduled", started: datetime | None = None,
            ended: datetime | None = None) -> str:  # fmt: skip
    run_id = f"{trigger}__{logical.isoformat()}"
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO dag_runs (dag_id, run_id, logical_date, trigger, conf, state, "
                "queued_at, started_at, ended_at) VALUES (:d, :r, :l, :t, '{}', :s, :l, :st, :e)"
            ),
            {"d": dag_id, "r": run_id, "l": logical, "t": trigger, "s": state,
             "st": started, "e": ended},
        )  # fmt: skip
    return run_id


def add_task_run(engine: sa.Engine, key: str, state: str, task_id: str = "a") -> None:
    dag_id, run_id = key.split("/")[:2]
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
                "try_number) VALUES (:k, :d, :r, :t, -1, :s, 1)"
            ),
            {"k": key, "d": dag_id, "r": run_id, "t": task_id, "s": state},
        )


def fill_every_tick(engine: sa.Engine) -> None:
    for dag_id in SCHEDULED:
        for tick in checks.expected_ticks(dag_id, START, STOP):
            add_run(engine, dag_id, tick)


def test_ticks_pass_when_each_has_one_run_and_fail_when_one_is_missing(engine: sa.Engine) -> None:
    fill_every_tick(engine)
    with engine.connect() as conn:
        assert checks.check_ticks(conn, START, STOP).ok
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM dag_runs WHERE dag_id = 'chaos_fan'"))
    with engine.connect() as conn:
        result = checks.check_ticks(conn, START, STOP)
    assert not result.ok
    assert any(e.startswith("chaos_fan@") for e in result.evidence)


def test_a_tick_with_two_runs_fails_the_tick_check(engine: sa.Engine) -> None:
    fill_every_tick(engine)
    tick = checks.expected_ticks("chaos_chain", START, STOP)[0]
    add_run(engine, "chaos_chain", tick, trigger="catchup")  # another run id, same tick
    with engine.connect() as conn:
        result = checks.check_ticks(conn, START, STOP)
    assert not result.ok and "1 doubled" in result.detail


def test_a_run_left_running_fails_the_final_check(engine: sa.Engine) -> None:
    add_run(engine, "chaos_chain", START, state="success")
    with engine.connect() as conn:
        assert checks.check_runs_final(conn).ok
    add_run(engine, "chaos_chain", START + timedelta(seconds=5), state="running")
    with engine.connect() as conn:
        assert not checks.check_runs_final(conn).ok


def test_a_success_without_its_effect_or_a_try_run_twice_fails_the_effect_check(
    engine: sa.Engine,
) -> None:
    run_id = add_run(engine, "chaos_chain", START)
    key = f"chaos_chain/{run_id}/a"
    add_task_run(engine, key, "success")
    with engine.connect() as conn:
        assert not checks.check_effects(conn).ok  # no ledger row
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO chaos_ledger (dedupe_key, dag_id, run_id, task_id) "
                "VALUES (:k, 'chaos_chain', :r, 'a')"
            ),
            {"k": key, "r": run_id},
        )
        conn.execute(
            sa.text(
                "INSERT INTO chaos_attempts (dedupe_key, dag_id, run_id, task_id, try_number) "
                "VALUES (:k, 'chaos_chain', :r, 'a', 1)"
            ),
            {"k": key, "r": run_id},
        )
    with engine.connect() as conn:
        assert checks.check_effects(conn).ok
    with engine.begin() as conn:  # the same try ran its effect a second time
        conn.execute(
            sa.text(
                "INSERT INTO chaos_attempts (dedupe_key, dag_id, run_id, task_id, try_number) "
                "VALUES (:k, 'chaos_chain', :r, 'a', 1)"
            ),
            {"k": key, "r": run_id},
        )
    with engine.connect() as conn:
        result = checks.check_effects(conn)
    assert not result.ok and "ran 2 times" in result.evidence[0]


def test_a_failed_task_run_without_a_dead_letter_fails_the_dead_letter_check(
    engine: sa.Engine,
) -> None:
    run_id = add_run(engine, "chaos_doomed", START, state="failed", trigger="manual")
    key = f"chaos_doomed/{run_id}/doomed"
    add_task_run(engine, key, "failed", task_id="doomed")
    with engine.connect() as conn:
        assert not checks.check_dead_letters(conn).ok
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO dead_letters (dedupe_key, dag_id, run_id, task_id, map_index, args, "
                "conf, error, tries, created_at) VALUES (:k, 'chaos_doomed', :r, 'doomed', -1, "
                "'{}', '{}', 'boom', 2, now())"
            ),
            {"k": key, "r": run_id},
        )
    with engine.connect() as conn:
        assert checks.check_dead_letters(conn).ok


def test_more_runs_at_once_than_the_limit_or_a_run_left_active_fails_the_slot_check(
    engine: sa.Engine,
) -> None:
    for i in range(3):
        add_run(engine, "chaos_map", START + timedelta(seconds=i), state="running")
    with engine.connect() as conn:
        peaks = checks.running_by_dag(conn)
        assert peaks == {"chaos_map": 3}
        assert not checks.check_slots(conn, {"chaos_map": 3}, peaks).ok  # still active
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE dag_runs SET state = 'success'"))
    with engine.connect() as conn:
        assert checks.check_slots(conn, {"chaos_map": 3}, peaks).ok
        result = checks.check_slots(conn, {"chaos_map": 2}, peaks)
    assert not result.ok and "3 running at once, limit 2" in result.evidence[0]
