"""Dispatching queued runs under max_active_runs: one winner per queued -> running step, never
over the limit, in logical-date order over any number of queued runs (issues #11 and #18)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from celery import Celery

from beatflow.runs import dispatch_waiting
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.integration.runs.conftest import make_app, sent_run_ids

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def test_two_racing_dispatchers_never_send_a_run_twice_nor_exceed_max_active_runs(
    app: Celery, redis_url: str, postgres_url: str, queue: str
) -> None:
    store = runtime_of(app).store
    # created in a shuffled order: the dispatch order must come from the logical date
    days = [(i * 7) % 24 for i in range(24)]
    for day in days:
        store.create_dag_run("t_single", f"r{day:02d}", logical_date=BASE + timedelta(days=day))
    apps = [app, make_app(redis_url, postgres_url, queue)]
    over_limit: list[int] = []
    start = threading.Barrier(len(apps))

    def dispatcher(a: Celery) -> None:
        runtime = runtime_of(a)
        start.wait()
        while True:
            dispatch_waiting(runtime, "t_single")
            running = runtime.store.list_dag_runs("t_single", state="running", limit=10)
            if len(running) > 1:
                over_limit.append(len(running))
            for run in running:  # a closer: the run ends, its slot frees up
                runtime.store.transition_dag_run(
                    "t_single", run.run_id, to="success", from_states={"running"}
                )
            store = runtime.store
            if not store.list_dag_runs("t_single", state="queued", limit=1) and not (
                store.list_dag_runs("t_single", state="running", limit=1)
            ):
                return

    threads = [threading.Thread(target=dispatcher, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    apps[1].close()

    sent = sent_run_ids(redis_url, queue, "t_single.step")
    assert sorted(sent) == sorted(f"r{d:02d}" for d in days)  # each run sent exactly once
    assert over_limit == []
    runs = store.list_dag_runs("t_single", limit=100)
    assert {r.state for r in runs} == {DagRunState.SUCCESS}
    by_start = sorted(runs, key=lambda r: (r.started_at, r.logical_date))
    assert [r.run_id for r in by_start] == [f"r{d:02d}" for d in range(24)]


def test_the_oldest_logical_date_goes_first_among_more_than_a_thousand_queued_runs(
    app: Celery, redis_url: str, queue: str
) -> None:
    store = runtime_of(app).store
    # a long catch-up: the oldest run was queued first, 1,200 newer ones after it
    store.create_dag_run("t_single", "oldest", logical_date=BASE)
    for i in range(1200):
        store.create_dag_run("t_single", f"new{i:04d}", logical_date=BASE + timedelta(hours=i + 1))
    assert dispatch_waiting(runtime_of(app), "t_single") == 1
    assert sent_run_ids(redis_url, queue, "t_single.step") == ["oldest"]
    assert dispatch_waiting(runtime_of(app), "t_single") == 0  # the one slot is taken
