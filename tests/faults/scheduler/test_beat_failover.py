"""Faults under a running beat: SIGKILL of the leader (repeatedly) and a Redis restart. No tick
may be lost and none may make two DAG runs."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import services
from tests.integration.scheduler.beatcluster import BeatCluster, beat_cluster, cluster
from tests.integration.scheduler.test_beat_replicas import assert_every_tick_once
from tests.procs import wait_for

pytestmark = pytest.mark.slow
__all__ = ["cluster"]  # the fixture


def test_sigkilled_leaders_are_replaced_and_every_gap_tick_runs_once_under_the_new_epoch(
    cluster: BeatCluster,
) -> None:
    dag = "beat_every_second"
    cluster.write_dag(dag)
    cluster.start_worker()
    cluster.start_beat("r0")
    cluster.start_beat("r1")
    leader = cluster.wait_leader()
    cluster.wait_runs(dag, 3)
    for i in range(3):
        proc = next(
            b for b in cluster.beats if b.name == leader and b.popen and b.popen.poll() is None
        )
        killed_at = time.time()
        proc.signal(signal.SIGKILL)
        alive = {b.name for b in cluster.beats if b.popen and b.popen.poll() is None}
        leader = cluster.wait_leader(alive - {proc.name}, timeout=60)
        # the first tick due after the kill has a DAG run, made by the new leader's epoch
        next_tick = int(killed_at) + 1
        run = wait_for(
            lambda t=next_tick: next(  # type: ignore[misc]
                (r for r in cluster.runs(dag) if r.logical_date.timestamp() == t), None
            ),
            timeout=60,
            message="the next due tick's run",
        )
        assert run.leader_epoch == i + 2, run  # type: ignore[attr-defined]
        cluster.start_beat(f"r{i + 2}")  # a fresh standby, as a Deployment would restart it
        cluster.wait_runs(dag, len(cluster.runs(dag)) + 2, timeout=60)
    dates = assert_every_tick_once(cluster, dag)
    epochs = sorted({r.leader_epoch or 0 for r in cluster.runs(dag)})
    assert epochs == [1, 2, 3, 4], f"epochs {epochs}"
    assert len(dates) >= 12


def test_scheduling_resumes_after_redis_restarts_under_a_running_beat(
    make_postgres_db: Callable[[], str], tmp_path: Path
) -> None:
    server = services.start_redis_server()
    try:
        with beat_cluster(tmp_path, server.url, make_postgres_db()) as cluster:
            dag = "beat_every_second"
            cluster.write_dag(dag)
            cluster.start_worker()
            beat = cluster.start_beat("a")
            cluster.wait_leader()
            cluster.wait_runs(dag, 3)
            server.stop()  # Redis goes away and comes back empty (no persistence here)
            wait_for(
                lambda: "cannot reach Redis" in beat.log(),
                timeout=60,
                message="the beat to notice Redis is down",
            )
            server.start()
            before = len(cluster.runs(dag))
            cluster.wait_leader(timeout=60)

            def resumed() -> bool:
                worker = cluster.worker
                assert worker is not None and worker.popen is not None
                if worker.popen.poll() is not None:
                    # The *worker* (not the beat) sometimes dies here: kombu 5.7's Redis
                    # transport hits AttributeError in _connparams while restoring unacked
                    # messages on connection loss ("Unrecoverable error"). A Deployment would
                    # restart it; so do we.
                    cluster.start_worker()
                return len(cluster.runs(dag)) >= before + 5

            wait_for(resumed, timeout=60, message="DAG runs after the Redis restart")
            assert beat.popen is not None and beat.popen.poll() is None, cluster.logs()
            per_date = cluster.runs_per_logical_date(dag)
            assert max(per_date.values()) == 1, "a tick made two DAG runs"
            assert "reached Redis again" in beat.log()
            # the epoch counter was lost with Redis's data, yet epochs only grow
            epochs = [
                r.leader_epoch or 0
                for r in sorted(cluster.runs(dag), key=lambda r: r.logical_date or 0)
            ]
            assert epochs == sorted(epochs) and epochs[-1] >= 2, epochs
    finally:
        server.close()
