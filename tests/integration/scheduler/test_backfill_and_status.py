"""Backfill creates one DAG run per past tick, idempotently; `beatflow beat status` shows the
leader, the lock's TTL and the next due DAGs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery

from beatflow.app import create_app
from beatflow.errors import SchedulerError
from beatflow.runs import make_run_id
from beatflow.runs.backfill import backfill
from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from tests import procs
from tests.integration.scheduler.beatcluster import BeatCluster, dag_source

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def app(redis_url: str, sqlite_url: str, tmp_path: Path) -> Iterator[Celery]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "beat_hourly.py").write_text(
        dag_source(
            "beat_hourly",
            schedule="'0 * * * *'",
            extra=", start_date=datetime(2026, 1, 1, 2, tzinfo=timezone.utc)",
        ).replace("from datetime import timedelta", "from datetime import datetime, timezone")
    )
    (dags / "beat_manual.py").write_text(dag_source("beat_manual", schedule="None"))
    (dags / "beat_capped.py").write_text(
        dag_source("beat_capped", schedule="'0 * * * *'").replace(
            "max_active_runs=10000", "max_active_runs=3"
        )
    )
    settings = Settings(broker_url=redis_url, database_url=sqlite_url, dags_folder=str(dags))
    app = create_app(settings)
    yield app
    app.close()


def test_backfill_creates_one_run_per_tick_inside_start_date_and_is_idempotent(app: Celery) -> None:
    runs = backfill(runtime_of(app), "beat_hourly", START, START + timedelta(hours=5))
    ticks = [START + timedelta(hours=h) for h in range(2, 6)]  # start_date is 02:00
    assert [r.logical_date for r in runs] == ticks
    assert [r.run_id for r in runs] == [make_run_id("scheduled", t) for t in ticks]
    assert {r.trigger for r in runs} == {"backfill"}
    again = backfill(runtime_of(app), "beat_hourly", START, START + timedelta(hours=5))
    assert [r.run_id for r in again] == [r.run_id for r in runs]
    store = runtime_of(app).store
    assert len(store.list_dag_runs("beat_hourly", limit=100)) == 4


def test_a_long_backfill_is_a_few_transactions_and_starts_the_oldest_runs(app: Celery) -> None:
    store = runtime_of(app).store  # opened (and its schema checked) before counting
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(store._engine, "commit", count)
    try:
        runs = backfill(runtime_of(app), "beat_capped", START, START + timedelta(hours=599))
    finally:
        sa.event.remove(store._engine, "commit", count)
    assert len(runs) == 600  # 00:00 to 23:00, 24 days later
    # the backfill's record, its release, two inserts of at most 500 runs, one dispatch and a
    # few batched reads: not a transaction per tick
    assert len(commits) <= 10, len(commits)
    # the oldest three fill max_active_runs=3; the rest wait queued
    assert [r.state for r in runs] == ["running"] * 3 + ["queued"] * 597
    assert [r.logical_date for r in runs] == sorted(r.logical_date for r in runs)  # type: ignore[type-var]


def test_backfill_stops_at_now_and_leaves_future_ticks_to_the_beat(app: Celery) -> None:
    now = datetime.now(UTC)
    runs = backfill(
        runtime_of(app), "beat_hourly", now - timedelta(hours=3), now + timedelta(days=2)
    )
    assert runs and all(r.logical_date is not None and r.logical_date <= now for r in runs)
    assert len(runs) == 3  # the three past hourly ticks, none of the 48 future ones


def test_backfill_refuses_a_dag_without_schedule_and_a_reversed_range(app: Celery) -> None:
    with pytest.raises(SchedulerError, match="no schedule"):
        backfill(runtime_of(app), "beat_manual", START, START + timedelta(days=1))
    with pytest.raises(SchedulerError, match="before"):
        backfill(runtime_of(app), "beat_hourly", START + timedelta(days=1), START)


@pytest.mark.slow
def test_beat_status_shows_the_leader_the_lock_ttl_and_the_next_due_dags(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("beat_status", schedule="timedelta(minutes=5)")
    cluster.start_beat("solo")
    cluster.wait_leader()
    procs.wait_for(lambda: cluster.status().entries == 1, timeout=60, message="the entry")
    beatflow = str(Path(sys.executable).parent / "beatflow")
    out = subprocess.run(
        [beatflow, "beat", "status", "--json"],
        env=procs.beatflow_env(cluster.env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    status = json.loads(out)
    assert status["leader"]["instance"] == "solo" and status["leader"]["epoch"] >= 1
    assert 0 < status["lock_ttl_seconds"] <= cluster.settings.beat_lock_timeout
    assert [d["dag_id"] for d in status["next_due"]] == ["beat_status"]
    assert [r["role"] for r in status["replicas"]] == ["leader"]
    text = subprocess.run(
        [beatflow, "beat", "status"],
        env=procs.beatflow_env(cluster.env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "leader: solo" in text and "beat_status" in text
