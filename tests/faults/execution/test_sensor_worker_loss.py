"""A worker SIGKILLed while a sensor in reschedule mode waits between pokes: the worker held the
next poke's message (an ETA message, reserved in its memory and unacked in Redis until the
visibility timeout, an hour here). The results DB has the sensor's next poke: once it is overdue
the reconciler re-sends the run, a new worker makes the poke, and the sensor and what follows it
complete exactly once. With a short visibility timeout the held message comes back too, and
finds its poke taken."""

from __future__ import annotations

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.faults.execution.test_worker_loss import FAST_REDELIVERY
from tests.procs import wait_for

pytestmark = pytest.mark.slow

FAST_RECONCILER = {
    "BEATFLOW_RECONCILE_INTERVAL": "0.5",
    "BEATFLOW_RECONCILE_STALL_SECONDS": "5",
    "BEATFLOW_LEASE_SECONDS": "3",
}


def _killed_between_pokes(c, run_id: str) -> None:
    key = f"t_sensor_counted/{run_id}/counted"

    def waiting() -> bool:
        pokes = c.store.sensor_pokes(key)  # written with the task run's up_for_reschedule row
        if pokes is None or pokes.poke_count < 2:
            return False
        return c.store.get_task_run(key).state == "up_for_reschedule"

    wait_for(waiting, timeout=60, message="the sensor to wait between pokes")
    c.workers[0].kill()  # SIGKILL the worker and its pool: its reserved poke message goes too
    assert c.store.get_task_run(key).state == "up_for_reschedule"
    (c.marks / f"ready-{run_id}").write_text("")  # the next poke is done
    c.start_worker()


@pytest.mark.parametrize(
    "env",
    [
        pytest.param(FAST_RECONCILER, id="message-held-for-an-hour"),
        pytest.param({**FAST_REDELIVERY, **FAST_RECONCILER}, id="message-redelivered-too"),
    ],
)
def test_a_worker_killed_while_a_sensor_waits_loses_and_doubles_nothing(
    tmp_path, redis_url, postgres_url, env
):
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        c.marks.mkdir(parents=True, exist_ok=True)
        run_id = trigger_dag(runtime_of(c.app), "t_sensor_counted").run_id
        _killed_between_pokes(c, run_id)
        final, tasks = c.wait("t_sensor_counted", run_id, timeout=120)
        assert final.state == "success", tasks
        assert tasks["counted"].state == "success"
        assert tasks["counted"].result == "ready"
        assert tasks["counted"].try_number == 1  # no retry taken, no worker-lost try
        assert tasks["once"].result == "ready"
        assert c.count(f"once-{run_id}") == 1  # what follows the sensor ran exactly once
        # every poke was made once: each recorded poke, plus the one that was done
        made = c.store.sensor_pokes(f"t_sensor_counted/{run_id}/counted")
        assert made is not None
        assert c.count(f"poke-{run_id}") == made.poke_count + 1
        assert [d for d in c.store.list_dead_letters("t_sensor_counted")] == []


def test_a_sensor_waiting_longer_than_the_stall_time_is_not_resumed_or_failed_by_the_reconciler(
    tmp_path, redis_url, postgres_url
):
    # a poke every 12 s, a run silent for 5 s counts as stalled, one resume before failing it:
    # a sensor waiting for its next poke is not silence
    env = {**FAST_RECONCILER, "BEATFLOW_RECONCILE_MAX_RESUMES": "1"}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        c.marks.mkdir(parents=True, exist_ok=True)
        run_id = trigger_dag(runtime_of(c.app), "t_sensor_slow").run_id
        wait_for(lambda: c.count(f"poke-{run_id}") >= 2, timeout=60, message="two pokes")
        (c.marks / f"ready-{run_id}").write_text("")
        final, tasks = c.wait("t_sensor_slow", run_id, timeout=60)
        assert final.state == "success", (final.failure_reason, tasks)
        assert final.resume_count == 0
        assert tasks["slow"].result is True
        assert c.count(f"poke-{run_id}") == 3
