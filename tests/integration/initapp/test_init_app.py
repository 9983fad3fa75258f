"""A Celery project of its own (proj/: its app, config, routes, tasks and signal handler) with
beatflow added by ``init_app``, run as its team runs it: ``celery -A proj worker``, ``celery -A
proj beat`` and ``beatflow --app proj`` (or BEATFLOW_APP=proj), with no beatflow app anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery

from beatflow.settings import Settings
from beatflow.store import Store
from tests import procs

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
BEATFLOW = str(Path(sys.executable).parent / "beatflow")


@dataclass
class Project:
    env: dict[str, str]
    marks: Path
    worker: procs.Proc

    def run(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, cwd=HERE, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture
def project(redis_url: str, sqlite_url: str, tmp_path: Path) -> Iterator[Project]:
    env = procs.beatflow_env(
        {
            "BEATFLOW_BROKER_URL": redis_url,
            "BEATFLOW_DATABASE_URL": sqlite_url,
            "BEATFLOW_DAGS_FOLDER": str(HERE / "dags"),
            "BEATFLOW_INSTANCE": f"beat-{uuid.uuid4().hex[:6]}",
            "PROJ_MARKS": str(tmp_path / "marks"),
        }
    )
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    Store.from_settings(Settings(broker_url=redis_url, database_url=sqlite_url)).upgrade()
    node = f"proj{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "celery", "-A", "proj", "worker", "-l", "info", "-c", "2"]
    argv += ["-Q", "default,proj_math", "-n", f"{node}@%h", "--without-mingle", "--without-gossip"]
    worker = procs.Proc(argv, env, tmp_path / "worker.log", name=node).start()
    probe = Celery("probe", broker=redis_url, set_as_current=False)
    try:
        procs.wait_worker_ready(probe, worker, timeout=120)
        yield Project(env=env, marks=tmp_path / "marks", worker=worker)
    finally:
        worker.stop()
        probe.close()


def test_a_dag_runs_beside_the_projects_own_task_route_and_signal(project: Project) -> None:
    out = project.run(
        BEATFLOW, "--app", "proj", "dags", "trigger", "proj_pipeline", "--wait", "--json"
    )
    assert out.returncode == 0, out.stderr + project.worker.log()[-3000:]
    assert json.loads(out.stdout)["state"] == "success", out.stdout

    # BEATFLOW_APP names the app as --app does
    env_run = subprocess.run(
        [BEATFLOW, "dags", "trigger", "proj_pipeline", "--wait", "--json"],
        env={**project.env, "BEATFLOW_APP": "proj"},
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert env_run.returncode == 0, env_run.stderr
    assert json.loads(env_run.stdout)["state"] == "success", env_run.stdout

    # the project's own task, sent by its own app, still takes its own route and runs
    script = "import json; from proj.tasks import add; print(json.dumps(add.delay(2, 3).get(60)))"
    out = project.run(sys.executable, "-c", script)
    assert out.returncode == 0, out.stderr + project.worker.log()[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"sum": 5, "routing_key": "proj_math"}

    # the project's own signal handler fired, for its task and for the DAG's
    procs.wait_for(
        lambda: (
            {"proj.tasks.add", "proj_pipeline.double", "proj_pipeline.total"}
            <= {p.name for p in project.marks.iterdir()}
        ),
        timeout=30,
        message="the project's task_success handler to mark both tasks",
    )


def test_celery_beat_of_the_project_runs_beatflows_ha_beat(
    project: Project, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "celery", "-A", "proj", "beat", "-l", "info"]
    argv += ["--schedule", str(tmp_path / "celerybeat-schedule")]
    beat = procs.Proc(argv, project.env, tmp_path / "beat.log", name="beat").start()
    try:

        def leading() -> bool:
            assert beat.popen is not None and beat.popen.poll() is None, beat.log()[-3000:]
            out = project.run(BEATFLOW, "health", "beat", timeout=30)
            return out.returncode == 0 and "is leader" in out.stdout + out.stderr

        procs.wait_for(leading, timeout=90, interval=0.5, message="the project's beat to lead")
    finally:
        beat.stop()


def test_beatflow_web_with_app_serves_the_projects_dags_as_init_app_set_them(
    project: Project, tmp_path: Path
) -> None:
    """``beatflow --app proj_with_dags web``: the settings init_app gave the project's app (its
    dags folder, passed in code) and not only the environment's."""
    import httpx

    from tests.services._base import free_port

    port = free_port()
    token = "proj-web-token-0123456789"
    env = {k: v for k, v in project.env.items() if k != "BEATFLOW_DAGS_FOLDER"}
    env |= {"BEATFLOW_WEB_PASSWORD": "proj-web-password", "BEATFLOW_WEB_TOKENS": f"ci:{token}"}
    argv = [BEATFLOW, "--app", "proj_with_dags", "web", "--host", "127.0.0.1", "--port", str(port)]
    web = procs.Proc(argv, env, tmp_path / "web.log", name="proj-web").start()
    try:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"http://127.0.0.1:{port}"

        def dags() -> list[str] | None:
            try:
                r = httpx.get(f"{url}/api/v1/dags", headers=headers, timeout=5)
            except httpx.TransportError:
                return None
            return [d["dag_id"] for d in r.json()["dags"]] if r.status_code == 200 else None

        listed = procs.wait_for(dags, 60, 0.2, "beatflow --app proj web to answer")
        assert "proj_pipeline" in listed, (listed, web.log()[-2000:])  # type: ignore[operator]
        r = httpx.post(f"{url}/api/v1/dags/proj_pipeline/runs", json={}, headers=headers)
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]

        def final() -> str | None:
            body = httpx.get(f"{url}/api/v1/dags/proj_pipeline/runs/{run_id}", headers=headers)
            state = body.json()["state"]
            return state if state in ("success", "failed") else None

        assert procs.wait_for(final, 120, 0.2, "the run to end") == "success"
    finally:
        web.stop()
