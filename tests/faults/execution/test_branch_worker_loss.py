"""A worker SIGKILLed while a branch function decides: the decision is written only with the
branch's success row, so the redelivered message takes the expired lease over, decides again,
and the run ends with the followed task run once and the other skipped."""

from __future__ import annotations

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.faults.execution.test_worker_loss import FAST_REDELIVERY
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_a_worker_killed_during_a_branch_decision_loses_and_doubles_nothing(
    tmp_path, redis_url, postgres_url
):
    with cluster(tmp_path, redis_url, postgres_url, env=FAST_REDELIVERY) as c:
        run_id = trigger_dag(runtime_of(c.app), "t_branch_killed").run_id
        wait_for(
            lambda: c.count(f"pick-start-{run_id}") == 1, timeout=30, message="the branch to start"
        )
        # nothing of the decision is recorded while the function runs
        assert c.store.get_task_run(f"t_branch_killed/{run_id}/pick_slowly").state == "running"
        assert set(c.tasks("t_branch_killed", run_id)) == {"pick_slowly"}
        c.workers[0].kill()  # SIGKILL the worker and its pool mid-decision
        (c.marks / f"release-{run_id}").write_text("")  # the next try decides at once
        c.start_worker()
        final, tasks = c.wait("t_branch_killed", run_id, timeout=90)
        assert final.state == "success", tasks
        assert c.count(f"pick-start-{run_id}") == 2  # decided again after the kill...
        assert tasks["pick_slowly"].try_number == 2
        assert tasks["pick_slowly"].result == ["left"]
        assert {t: r.state for t, r in tasks.items()} == {
            "pick_slowly": "success",
            "left": "success",
            "right": "skipped",
            "after_right": "skipped",
            "join": "success",
        }
        # ...and what it chose ran exactly once, what it did not never ran
        assert c.count(f"left-{run_id}") == 1
        assert c.count(f"right-{run_id}") == 0
        assert c.count(f"join-{run_id}") == 1
        assert [d for d in c.store.list_dead_letters("t_branch_killed")] == []
