"""The same stock Celery project (proj/) on RabbitMQ, Redis kept for beatflow's state and the
results, as a team whose Celery fleet runs on RabbitMQ runs it: a DAG to success, a failing DAG
task that Celery's events (what Flower shows) record as FAILURE, an Idempotent task sent twice
that runs once, and a periodic entry of the project's beat_schedule that fires once per tick
across a SIGKILL of the beat leader."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from redbeat.schedulers import RedBeatSchedulerEntry

from beatflow import connections, keys
from beatflow.scheduler.status import read_status
from beatflow.settings import Settings
from beatflow.store import Store
from tests import procs, services
from tests.events import captured_events
from tests.integration.initapp.test_init_app import BEATFLOW, HERE, Project

pytestmark = pytest.mark.slow


@pytest.fixture
def rabbit_project(
    rabbitmq_server: services.RabbitServer, redis_url: str, sqlite_url: str, tmp_path: Path
) -> Iterator[Project]:
    queue = f"proj{uuid.uuid4().hex[:6]}"  # the session's vhost is shared by its tests
    env = procs.beatflow_env(
        {
            "BEATFLOW_BROKER_URL": rabbitmq_server.url,
            "BEATFLOW_REDIS_URL": redis_url,
            "BEATFLOW_DATABASE_URL": sqlite_url,
            "BEATFLOW_DAGS_FOLDER": str(HERE / "dags"),
            "BEATFLOW_QUEUES": queue,
            "PROJ_MARKS": str(tmp_path / "marks"),
        }
    )
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    Store.from_settings(Settings(database_url=sqlite_url)).upgrade()
    node = f"proj{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "celery", "-A", "proj", "worker", "-l", "info", "-c", "2"]
    argv += ["-Q", f"{queue},proj_math", "-n", f"{node}@%h", "--without-mingle", "--without-gossip"]
    worker = procs.Proc(argv, env, tmp_path / "worker.log", name=node).start()
    probe = Celery("probe", broker=rabbitmq_server.url, set_as_current=False)
    try:
        procs.wait_worker_ready(probe, worker, timeout=120)
        yield Project(env=env, marks=tmp_path / "marks", worker=worker)
    finally:
        worker.stop()
        probe.close()


def marks(project: Project, name: str) -> int:
    path = project.marks / name
    return len(path.read_text()) if path.exists() else 0


def test_on_rabbitmq_a_dag_succeeds_and_a_failing_dag_task_is_a_celery_failure(
    rabbit_project: Project,
) -> None:
    project = rabbit_project
    out = project.run(
        BEATFLOW, "--app", "proj", "dags", "trigger", "proj_pipeline", "--wait", "--json"
    )
    assert out.returncode == 0, out.stderr + project.worker.log()[-3000:]
    assert json.loads(out.stdout)["state"] == "success", out.stdout

    probe = Celery("probe", broker=project.env["BEATFLOW_BROKER_URL"], set_as_current=False)
    try:
        with captured_events(probe) as captured:
            out = project.run(
                BEATFLOW, "--app", "proj", "dags", "trigger", "proj_failing", "--wait", "--json"
            )
            assert json.loads(out.stdout)["state"] == "failed", out.stdout + out.stderr

            def failed() -> list[dict[str, object]]:
                boom = {
                    e["uuid"]
                    for e in captured.of_type("task-received")
                    if e.get("name") == "proj_failing.boom"
                }
                return [e for e in captured.of_type("task-failed") if e["uuid"] in boom]

            [event] = procs.wait_for(failed, 30, message="the task-failed event Flower reads")
    finally:
        probe.close()
    assert "the project's task failed" in str(event["exception"])
    assert not [e for e in captured.of_type("task-succeeded") if e["uuid"] == event["uuid"]]


def test_on_rabbitmq_an_idempotent_task_sent_twice_runs_once(rabbit_project: Project) -> None:
    script = (
        "from proj.tasks import charge\n"
        "first, second = charge.delay('o-1'), charge.delay('o-1')\n"
        "print(first.get(timeout=60), '|', second.get(timeout=60))\n"
    )
    out = rabbit_project.run(sys.executable, "-c", script)
    assert out.returncode == 0, out.stderr + rabbit_project.worker.log()[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "charged o-1 | charged o-1"
    assert marks(rabbit_project, "charged-o-1") == 1


def test_on_rabbitmq_a_periodic_entry_fires_once_per_tick_across_a_beat_leader_kill(
    rabbit_project: Project, tmp_path: Path
) -> None:
    project = rabbit_project
    client = connections.redis_client(project.env["BEATFLOW_REDIS_URL"], timeout=5)

    def leader() -> str | None:
        st = read_status(client)
        return None if st.leader is None else str(st.leader["instance"])

    beats = {}
    for name in ("a", "b"):
        argv = [sys.executable, "-m", "celery", "-A", "proj", "beat", "-l", "info"]
        argv += ["--schedule", str(tmp_path / f"celerybeat-schedule-{name}")]
        env = {**project.env, "BEATFLOW_INSTANCE": f"beat-{name}"}
        beats[f"beat-{name}"] = procs.Proc(argv, env, tmp_path / f"beat-{name}.log", name).start()
    try:
        first = str(procs.wait_for(leader, 90, interval=0.2, message="a beat leader"))
        procs.wait_for(lambda: marks(project, "touched") >= 2, 60, message="touches")
        beats[first].signal(signal.SIGKILL)  # the leader dies mid-term
        procs.wait_for(lambda: leader() not in (None, first), 60, message="the standby to lead")
        before = marks(project, "touched")
        procs.wait_for(lambda: marks(project, "touched") >= before + 3, 60, message="touches")
    finally:
        for beat in beats.values():
            beat.stop()

    def sent() -> int:
        meta = client.hget(keys.REDBEAT_PREFIX + "touch-every-second", "meta")
        return int(RedBeatSchedulerEntry.decode_meta(meta).get("total_run_count") or 0)

    try:
        # every tick the beats advanced (across the kill) ran exactly once: none twice, none lost
        procs.wait_for(
            lambda: marks(project, "touched") == sent() or None,
            60,
            message="the project's touches to match the beat's ticks",
        )
    finally:
        client.close()
