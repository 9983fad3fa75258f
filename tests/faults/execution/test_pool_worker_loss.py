"""A worker SIGKILLed while its task holds a pool's only slot: the slot is held by the dead
task run (running, its lease expired) until the redelivered message takes the lease over,
then every task of the pool completes exactly once and the slot comes back."""

from __future__ import annotations

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.faults.execution.test_worker_loss import FAST_REDELIVERY
from tests.integration.pools.test_pools import inside, journal, max_concurrency
from tests.procs import wait_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("db", ["sqlite_url", "postgres_url"])
def test_a_worker_killed_holding_a_pool_slot_gives_it_back_and_all_complete_once(
    tmp_path, redis_url, db, request
):
    database_url = request.getfixturevalue(db)
    with cluster(tmp_path, redis_url, database_url, env=FAST_REDELIVERY, workers=0) as c:
        c.store.set_pool("t_held", 1)
        c.start_worker(concurrency=4)
        run_id = trigger_dag(runtime_of(c.app), "t_pool_held").run_id
        wait_for(lambda: inside(c, "t_held") == 1, timeout=60, message="a task in the pool")
        pool = c.store.get_pool("t_held")
        assert pool is not None and pool.used == 1
        c.workers[0].kill()  # SIGKILL the worker (and the task holding the only slot)
        (c.marks / f"release-{run_id}").write_text("")  # every next try ends at once
        c.start_worker(concurrency=4)
        final, tasks = c.wait("t_pool_held", run_id, timeout=120)
        assert final.state == "success", tasks
        assert sorted(t.state for t in tasks.values()) == ["success"] * 4
        assert c.count(f"start-{run_id}") == 5  # the killed try started again...
        assert c.count(f"done-{run_id}") == 4  # ...and each task completed exactly once
        assert sum(t.try_number for t in tasks.values()) == 5
        assert max_concurrency(journal(c, "t_held")) == 1
        pool = c.store.get_pool("t_held")
        assert pool is not None and (pool.used, pool.free) == (0, 1)
