"""A plain install works: the wheel installed with NO extras into a fresh venv runs every command
that docker-compose.yml, k8s/ and helm/ run (`beatflow --help`, the migration, a worker until it
answers ping, a beat, Flower with its password from the environment, the exporter serving
/metrics, beatflow web, the health probes, `helm test`'s ping, the prune CronJob) against real
Redis and PostgreSQL, with nothing of the source tree or the test venv on its path."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.error
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs, services

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = procs.ROOT


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding beatflow's wheel and its runtime dependencies only (pip's cache ok)."""
    tmp = tmp_path_factory.mktemp("plain")
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    with services.source_build_lock():
        _pip([*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("beatflow-*.whl")
    target = tmp / "venv"
    venv.create(target, with_pip=True, clear=True)
    python = target / "bin" / "python"
    _pip([str(python), "-m", "pip", "--disable-pip-version-check", "-q", "install", str(wheel)])
    return target / "bin"


def _pip(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"


def _env(bindir: Path, **extra: str) -> dict[str, str]:
    """The environment a container gets: no BEATFLOW_* of ours, no PYTHONPATH into the tree."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BEATFLOW_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env.update({"PYTHONUNBUFFERED": "1", "BEATFLOW_LOG_FORMAT": "json", **extra})
    return env


def _run(bindir: Path, argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [str(bindir / argv[0]), *argv[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def _status(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # local URL
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@pytest.fixture
def started() -> Iterator[list[procs.Proc]]:
    running: list[procs.Proc] = []
    yield running
    for proc in reversed(running):
        proc.stop()


def test_beatflow_help_runs_on_a_plain_install(plain_venv: Path, tmp_path: Path) -> None:
    out = _run(plain_venv, ["beatflow", "--help"], _env(plain_venv), tmp_path)
    for command in ("db", "dags", "exporter", "health"):
        assert command in out


def test_the_deployed_commands_run_on_a_plain_install(
    plain_venv: Path,
    redis_url: str,
    postgres_url: str,
    tmp_path: Path,
    started: list[procs.Proc],
) -> None:
    flower_port, metrics_port, web_port = (services.free_port() for _ in range(3))
    env = _env(
        plain_venv,
        BEATFLOW_BROKER_URL=redis_url,
        BEATFLOW_DATABASE_URL=postgres_url,
        BEATFLOW_DAGS_FOLDER=str(ROOT / "dags"),
        BEATFLOW_QUEUES="default",
        BEATFLOW_FLOWER_USER="ops",
        BEATFLOW_FLOWER_PASSWORD="plain-install-pw",
        BEATFLOW_FLOWER_PORT=str(flower_port),
        BEATFLOW_METRICS_PORT=str(metrics_port),
        BEATFLOW_WEB_PORT=str(web_port),
        BEATFLOW_WEB_PASSWORD="plain-install-web-pw",
        BEATFLOW_WEB_SECRET_KEY="k" * 40,
    )
    # cwd outside the tree: nothing may be imported from platform/ by accident.
    cwd = tmp_path

    _run(plain_venv, ["beatflow", "db", "upgrade"], env, cwd)

    def start(name: str, argv: list[str]) -> procs.Proc:
        proc = procs.Proc(
            [str(plain_venv / argv[0]), *argv[1:]], env, tmp_path / f"{name}.log", name=name
        )
        with open(proc.log_path, "ab") as log:
            proc.popen = subprocess.Popen(
                proc.argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(proc)
        return proc

    def alive(proc: procs.Proc) -> None:
        assert proc.popen is not None
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited early:\n{proc.log()[-3000:]}")

    def probe(what: str, *args: str) -> bool:
        done = subprocess.run(
            [str(plain_venv / "beatflow"), "health", what, *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode == 0

    worker = start(
        "worker",
        ["celery", "-A", "beatflow", "worker", "-l", "info", "-E", "-Q", "default",
         "--concurrency", "2", "-n", "plain@%h"],
    )  # fmt: skip
    beat = start("beat", ["celery", "-A", "beatflow", "beat", "-l", "info",
                          "--schedule", str(tmp_path / "celerybeat-schedule")])  # fmt: skip
    flower = start("flower", ["celery", "-A", "beatflow", "flower", f"--port={flower_port}",
                              "--address=127.0.0.1"])  # fmt: skip
    exporter = start("exporter", ["beatflow", "exporter"])
    web = start("web", ["beatflow", "web", "--port", str(web_port), "--host", "127.0.0.1"])

    node = f"plain@{os.uname().nodename}"

    def worker_up() -> bool:
        alive(worker)
        return probe("worker", "--node", node, "--timeout", "2")

    procs.wait_for(worker_up, timeout=120, interval=0.5, message="the worker to answer ping")

    def beat_up() -> bool:
        alive(beat)
        return probe("beat")

    procs.wait_for(beat_up, timeout=60, interval=0.5, message="the beat health probe")

    flower_url = f"http://127.0.0.1:{flower_port}"

    def flower_up() -> bool:
        alive(flower)
        return _status(f"{flower_url}/healthcheck") == 200

    procs.wait_for(flower_up, timeout=60, interval=0.5, message="Flower to answer")
    assert _status(f"{flower_url}/api/workers") == 401
    assert _status(f"{flower_url}/api/workers", ("ops", "plain-install-pw")) == 200
    assert probe("flower")

    metrics = f"http://127.0.0.1:{metrics_port}/metrics"

    def exporter_up() -> bool:
        alive(exporter)
        return _status(metrics) == 200

    procs.wait_for(exporter_up, timeout=60, interval=0.5, message="the exporter's /metrics")
    with urllib.request.urlopen(metrics, timeout=5) as response:  # local URL
        assert b"celery_" in response.read()
    assert probe("exporter")

    web_url = f"http://127.0.0.1:{web_port}"

    def web_up() -> bool:
        alive(web)
        return _status(f"{web_url}/healthz") == 200

    procs.wait_for(web_up, timeout=60, interval=0.5, message="beatflow web's /healthz")
    assert _status(f"{web_url}/api/v1/dags") == 401
    assert probe("web")

    # `helm test`'s ping, and the prune CronJob's command.
    _run(plain_venv, ["celery", "-A", "beatflow", "inspect", "ping", "--timeout", "10"], env, cwd)
    _run(plain_venv, ["beatflow", "db", "prune", "--older-than", "30d"], env, cwd)

    # A DAG run end to end through the plain install's own CLI.
    out = _run(
        plain_venv,
        ["beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "120"],
        env,
        cwd,
    )
    assert "success" in out, out
