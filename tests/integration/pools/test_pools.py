"""Pools on real workers (two worker processes, more process slots than the pool has), on
PostgreSQL and SQLite: tasks measure their own concurrency (journal lines appended on entry
and exit) and the pool's limit holds exactly, counting a task's pool_slots."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.observability.metrics import Metrics
from beatflow.observability.results import ResultsPoller
from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import Cluster, cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def journal(c: Cluster, pool: str) -> list[tuple[str, str]]:
    path = c.marks / f"journal-{pool}"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(line[0], line[2:]) for line in lines]


def max_concurrency(entries: list[tuple[str, str]]) -> int:
    inside: set[str] = set()
    most = 0
    for sign, key in entries:
        if sign == "+":
            inside.add(key)
            most = max(most, len(inside))
        else:
            inside.discard(key)
    return most


def inside(c: Cluster, pool: str) -> int:
    entries = journal(c, pool)
    return sum(1 for s, _ in entries if s == "+") - sum(1 for s, _ in entries if s == "-")


def pool_cluster(tmp_path: Path, redis_url: str, database_url: str, **kw: object):
    return cluster(tmp_path, redis_url, database_url, workers=0, **kw)  # type: ignore[arg-type]


def start_workers(c: Cluster, n: int = 2, concurrency: int = 4) -> None:
    for _ in range(n):
        c.start_worker(concurrency=concurrency)


def test_ten_tasks_of_two_dags_never_exceed_their_shared_pool(tmp_path, redis_url, database_url):
    with pool_cluster(tmp_path, redis_url, database_url) as c:
        c.store.set_pool("t_shared", 4, "the warehouse")
        start_workers(c)  # 8 process slots for a pool of 4
        rt = runtime_of(c.app)
        runs = [trigger_dag(rt, d).run_id for d in ("t_pool_a", "t_pool_b")]
        for dag_id, run_id in zip(("t_pool_a", "t_pool_b"), runs, strict=True):
            final, tasks = c.wait(dag_id, run_id, timeout=120)
            assert final.state == "success", tasks
            assert len(tasks) == 5 and all(t.try_number == 1 for t in tasks.values())
        entries = journal(c, "t_shared")
        assert len(entries) == 20  # every task entered and left once
        assert max_concurrency(entries) == 4
        pool = c.store.get_pool("t_shared")
        assert pool is not None and (pool.used, pool.free) == (0, 4)


def test_pool_slots_count_double(tmp_path, redis_url, database_url):
    with pool_cluster(tmp_path, redis_url, database_url) as c:
        c.store.set_pool("t_double", 4)
        start_workers(c)
        final, tasks = c.run("t_pool_double", timeout=120)
        assert final.state == "success", tasks
        entries = journal(c, "t_double")
        assert len(entries) == 8
        assert max_concurrency(entries) == 2  # 2 slots each in a pool of 4


def test_a_pool_shows_used_and_queued_and_resizing_takes_effect(tmp_path, redis_url, database_url):
    with pool_cluster(tmp_path, redis_url, database_url) as c:
        c.store.set_pool("t_held", 1)
        start_workers(c)
        run_id = trigger_dag(runtime_of(c.app), "t_pool_held").run_id

        def counts() -> tuple[int, int]:
            pool = c.store.get_pool("t_held")
            assert pool is not None
            return pool.used, pool.queued

        wait_for(lambda: counts() == (1, 3), timeout=60, message="1 used, 3 queued")
        assert inside(c, "t_held") == 1
        # the exporter's gauge, as its database poll sets it
        metrics = Metrics()
        ResultsPoller(c.store, metrics, dags=dict, default_time_limit=60.0).poll()
        gauge = {
            state: metrics.registry.get_sample_value(
                "beatflow_pool_slots", {"pool": "t_held", "state": state}
            )
            for state in ("used", "queued", "free")
        }
        assert gauge == {"used": 1.0, "queued": 3.0, "free": 0.0}
        waiting = c.store.pool_waiters("t_pool_held", run_id)
        assert len(waiting) == 3 and {w.pool for w in waiting} == {"t_held"}
        c.store.set_pool("t_held", 3)
        wait_for(lambda: inside(c, "t_held") == 3, timeout=60, message="3 tasks in the pool")
        assert counts() == (3, 1)
        (c.marks / f"release-{run_id}").write_text("")
        final, tasks = c.wait("t_pool_held", run_id, timeout=120)
        assert final.state == "success", tasks
        assert max_concurrency(journal(c, "t_held")) == 3
        assert counts() == (0, 0)
        assert c.store.pool_waiters("t_pool_held", run_id) == []


def test_a_task_whose_pool_does_not_exist_fails_with_the_reason(tmp_path, redis_url, database_url):
    with pool_cluster(tmp_path, redis_url, database_url) as c:
        start_workers(c, 1, 2)
        final, tasks = c.run("t_pool_missing", timeout=60)
        assert final.state == "failed"
        assert tasks["nowhere"].state == "failed"
        assert "pool 't_nowhere' does not exist" in (tasks["nowhere"].error or "")
