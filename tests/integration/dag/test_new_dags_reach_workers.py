"""A DAG file added to the dags folder while a worker runs reaches that worker without a restart
(by a task's message, and by the beat's fire of its first scheduled run); a DAG that really
cannot load on the worker ends its run failed with the reason in full."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from beatflow.runs.fire import FIRE_BATCH_TASK, create_scheduled_run
from beatflow.runtime import runtime_of
from tests.cluster import DAGS, cluster

pytestmark = pytest.mark.slow

LATE_DAG = """
from beatflow import DAG, task


@task
def first() -> int:
    return 20


@task
def second(x: int) -> int:
    return x + 1


with DAG("late_arrival"):
    second(first())
"""

# Imports in the test process (which triggers, as the beat or the web would) but not in the
# worker's processes: the worker has the file and still cannot load the DAG.
WORKER_ONLY_BROKEN = """
import os

from beatflow import DAG, task

if os.environ.get("BF_TEST_WORKER_SIDE"):
    raise ImportError(
        "the worker lacks a package this DAG needs: " + "x" * 200 + " END-OF-REASON"
    )


@task
def only() -> int:
    return 1


with DAG("never_on_worker"):
    only()
"""


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name in ("chains.py", "_marks.py"):
        shutil.copy(DAGS / name, folder / name)
    return folder


def test_a_dag_file_added_while_the_worker_runs_is_run_without_a_restart(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    folder = _folder(tmp_path)
    with cluster(tmp_path, redis_url, postgres_url, dags=folder) as c:
        worker = c.workers[0]
        final, _ = c.run("t_chain")  # the worker has loaded the folder and runs its DAGs
        assert final.state == "success"
        (folder / "late.py").write_text(LATE_DAG)
        runtime_of(c.app).reload()  # the triggering side (beat, web) picks the new file up
        final, tasks = c.run("late_arrival")
        assert final.state == "success", c.log_tail()
        assert tasks["second"].result == 21
        assert c.workers == [worker] and worker.popen is not None
        assert worker.popen.poll() is None  # the same worker process, never restarted
        assert "loaded new DAGs late_arrival" in c.log()


def test_a_scheduled_dag_added_while_the_worker_runs_has_its_fired_run_dispatched(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    # the beat (this test process) sees the new file and fires a tick; no message of the DAG's
    # tasks has reached the worker yet: the fire itself must find the new DAG there
    folder = _folder(tmp_path)
    with cluster(tmp_path, redis_url, postgres_url, dags=folder) as c:
        final, _ = c.run("t_chain")  # the worker has loaded the folder and runs its DAGs
        assert final.state == "success"
        (folder / "late.py").write_text(LATE_DAG)
        runtime = runtime_of(c.app)
        runtime.reload()
        epoch = c.store.epoch_floor() + 1
        tick = datetime(2026, 5, 1, 6, tzinfo=UTC)
        run = create_scheduled_run(c.store, runtime.dag("late_arrival"), tick, "scheduled", epoch)
        c.app.send_task(
            FIRE_BATCH_TASK, args=[[["late_arrival", tick.isoformat(), "scheduled"]], epoch]
        )
        final, tasks = c.wait("late_arrival", run.run_id, timeout=60)
        assert final.state == "success", c.log_tail()
        assert tasks["second"].result == 22 - 1
        assert "loaded new DAGs late_arrival" in c.log()


def test_a_dag_the_worker_cannot_load_fails_its_run_with_the_full_reason(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    folder = _folder(tmp_path)
    with cluster(
        tmp_path, redis_url, postgres_url, dags=folder, env={"BF_TEST_WORKER_SIDE": "1"}
    ) as c:
        (folder / "never.py").write_text(WORKER_ONLY_BROKEN)
        runtime_of(c.app).reload()
        final, tasks = c.run("never_on_worker", timeout=60)
        assert final.state == "failed"
        error = tasks["only"].error or ""
        for part in ('DAG "never_on_worker" is not loaded', "never.py", "END-OF-REASON"):
            assert part in error, error
            assert part in (final.failure_reason or ""), final.failure_reason
        assert len(error) > 160
