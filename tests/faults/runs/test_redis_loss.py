"""Runs survive their Redis: a trigger while the broker is down fails fast with one line and
leaves the run queued (the same trigger again, or the reconciler, sends it later); a Redis
restarted empty in the middle of a chord loses the chord, and the reconciler resumes the run
so every side effect still happens exactly once."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from beatflow.errors import BrokerUnavailableError
from beatflow.runs import RunRequest, trigger_dag, trigger_dags
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState, TaskRunState
from tests.cluster import Cluster, cluster
from tests.faults.runs.conftest import BOUND, FAST_RECONCILER
from tests.procs import run_beatflow, wait_for
from tests.services import OwnedRedis

pytestmark = pytest.mark.slow


def beatflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    settings = {k: v for k, v in env.items() if k != "BEATFLOW_TEST_MARKS"}
    return run_beatflow({**settings, "BEATFLOW_LOG_FORMAT": "text"}, *args)


def reconnected(c: Cluster) -> bool:
    """Whether this process's broker connections work again (a stale one fails once)."""
    try:
        c.app.control.ping(timeout=0.2)
    except Exception:  # noqa: BLE001 - any failure: not yet
        return False
    return True


def test_a_trigger_with_the_broker_down_fails_in_one_line_and_the_same_trigger_sends_it_later(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    run_id = f"down-{uuid.uuid4().hex[:6]}"
    with cluster(tmp_path, own_redis.url, postgres_url, workers=0, env=FAST_RECONCILER) as c:
        own_redis.stop()
        down = beatflow(c.env, "dags", "trigger", "t_single", "--run-id", run_id)
        assert down.returncode == 1, down.stdout + down.stderr
        errors = [line for line in down.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "broker unreachable" in errors[0], down.stderr
        assert "Traceback" not in down.stderr
        run = c.store.get_dag_run("t_single", run_id)
        assert run is not None and run.state == DagRunState.QUEUED  # left for the reconciler

        own_redis.start()  # back, and empty
        again = beatflow(c.env, "dags", "trigger", "t_single", "--run-id", run_id)
        assert again.returncode == 0, again.stderr
        run = c.store.get_dag_run("t_single", run_id)
        assert run is not None and run.state == DagRunState.RUNNING  # sent this time

        c.start_worker()
        final, _ = c.wait("t_single", run_id, timeout=BOUND)
        assert final.state == DagRunState.SUCCESS
        assert c.count(f"step-{run_id}") == 1
        once_more = beatflow(c.env, "dags", "trigger", "t_single", "--run-id", run_id)
        assert once_more.returncode == 0 and "(success)" in once_more.stdout  # not run again
        assert c.count(f"step-{run_id}") == 1


def test_a_batch_triggered_with_the_broker_down_waits_queued_and_each_run_runs_once_later(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    asked = [RunRequest("t_single", run_id=f"batch-s{i}") for i in range(3)]
    asked += [RunRequest("t_chord", run_id=f"batch-c{i}") for i in range(3)]
    with cluster(tmp_path, own_redis.url, postgres_url, workers=0, env=FAST_RECONCILER) as c:
        own_redis.stop()
        with pytest.raises(BrokerUnavailableError):
            trigger_dags(runtime_of(c.app), asked)
        for request in asked:  # created, and back to queued: nothing was sent
            run = c.store.get_dag_run(request.dag_id, str(request.run_id))
            assert run is not None and run.state == DagRunState.QUEUED, request

        own_redis.start()  # back, and empty: the worker's reconciler sends the queued runs
        wait_for(lambda: reconnected(c), timeout=30, message="this process to reconnect")
        c.start_worker()
        for request in asked:
            final, _ = c.wait(request.dag_id, str(request.run_id), timeout=BOUND)
            assert final.state == DagRunState.SUCCESS, request
        again = trigger_dags(
            runtime_of(c.app), asked
        )  # the same batch again: the same runs, not rerun
        assert {r.state for r in again} == {DagRunState.SUCCESS}
        for i in range(3):
            assert c.count(f"step-batch-s{i}") == 1
            for name in ("part1", "part2", "join", "tail"):
                assert c.count(f"{name}-batch-c{i}") == 1, name


def test_redis_restarted_empty_mid_chord_the_run_is_resumed_and_each_side_effect_happens_once(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    with cluster(tmp_path, own_redis.url, postgres_url, env=FAST_RECONCILER) as c:
        run = trigger_dag(runtime_of(c.app), "t_chord", run_id="mid-chord", conf={"hold": 90.0})
        count: Callable[[str], int] = c.count
        wait_for(lambda: count("part1-mid-chord") and count("part2-mid-chord"), timeout=60)
        (c.marks / "gate-mid-chord-1").touch()
        wait_for(
            lambda: c.tasks("t_chord", run.run_id)["p1"].state == TaskRunState.SUCCESS,
            timeout=60,
            message="p1 to finish before the restart",
        )
        own_redis.stop()  # the chord's counter and every unacked message are gone
        own_redis.start()
        # A worker may die of the restart itself (kombu's Redis transport: "Unrecoverable error:
        # AttributeError 'NoneType' ... 'hostname'" while restoring unacked messages, cf.
        # celery/kombu#970): start one more, as the worker's supervisor would.
        wait_for(lambda: reconnected(c), timeout=30, message="this process to reconnect")
        c.start_worker()
        (c.marks / "gate-mid-chord-2").touch()
        final, tasks = c.wait("t_chord", run.run_id, timeout=BOUND)
        assert final.state == DagRunState.SUCCESS
        assert tasks["tail"].result == 30
        assert final.resume_count >= 1  # the chord's body could only run by a resume
        for name in ("part1", "part2", "join", "tail"):
            assert c.count(f"{name}-mid-chord") == 1, name
