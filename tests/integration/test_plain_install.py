"""Installs by role, each from beatflow's wheel into a fresh venv, with nothing of the source tree
or the test venv on its path.

- A plain install (no extras) is what a worker and a beat need: `beatflow --help`, a worker, a
  beat, the exporter and the health probes run a DAG end to end on SQLite; `beatflow web`,
  `beatflow dev` and a PostgreSQL URL say which extra to install and exit 2, without a traceback.
- The image's extras (web, postgres, flower: `beatflow[all]`) run every command that
  docker-compose.yml, k8s/ and helm/ run (the migration, a worker until it answers ping, a beat,
  Flower with its password from the environment, the exporter serving /metrics, beatflow web, the
  health probes, `helm test`'s ping, the prune CronJob) against real Redis and PostgreSQL; and
  the worker's, the beat's and the CLI's entry points import none of those extras' modules."""

from __future__ import annotations

import json
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
from tests.http_get import http_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = procs.ROOT
PIP = ["-m", "pip", "--disable-pip-version-check", "-q"]
# The top-level modules of the extras: none may load in a worker, a beat or `beatflow --help`.
OPTIONAL_MODULES = ("fastapi", "starlette", "uvicorn", "jinja2", "multipart", "psycopg")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """beatflow's wheel, built from the tree (no dependencies)."""
    wheels = tmp_path_factory.mktemp("wheels")
    with services.source_build_lock():
        _pip([sys.executable, *PIP, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)])
    (built,) = wheels.glob("beatflow-*.whl")
    return built


def _venv_with(tmp: Path, requirement: str) -> Path:
    """A fresh venv holding ``requirement`` and its dependencies only (pip's cache ok), put there
    by this interpreter's pip (``--python``): the venv needs no pip of its own, whose ensurepip
    took 13 s a venv on a 2-core machine."""
    target = tmp / "venv"
    venv.create(target, with_pip=False, clear=True)
    _pip([sys.executable, *PIP, "--python", str(target / "bin" / "python"), "install", requirement])
    return target / "bin"


@pytest.fixture(scope="module")
def plain_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip install beatflow`: no extras."""
    return _venv_with(tmp_path_factory.mktemp("plain"), str(wheel))


@pytest.fixture(scope="module")
def image_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the image installs: beatflow[all] (web, postgres, flower)."""
    return _venv_with(tmp_path_factory.mktemp("image"), f"beatflow[all] @ {wheel.as_uri()}")


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
    done = _call(bindir, argv, env, cwd)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def _call(
    bindir: Path, argv: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bindir / argv[0]), *argv[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def started() -> Iterator[list[procs.Proc]]:
    running: list[procs.Proc] = []
    yield running
    for proc in reversed(running):
        proc.stop()


def _start(
    bindir: Path,
    name: str,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    started: list[procs.Proc],
) -> procs.Proc:
    proc = procs.Proc([str(bindir / argv[0]), *argv[1:]], env, cwd / f"{name}.log", name=name)
    with open(proc.log_path, "ab") as log:
        proc.popen = subprocess.Popen(
            proc.argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    started.append(proc)
    return proc


def _alive(proc: procs.Proc) -> None:
    assert proc.popen is not None
    if proc.popen.poll() is not None:
        raise AssertionError(f"{proc.name} exited early:\n{proc.log()[-3000:]}")


def test_beatflow_help_runs_on_a_plain_install(plain_venv: Path, tmp_path: Path) -> None:
    out = _run(plain_venv, ["beatflow", "--help"], _env(plain_venv), tmp_path)
    for command in ("db", "dags", "exporter", "health", "web", "dev"):
        assert command in out
    assert "Exit codes:" in out
    for command in ("dags", "runs", "dlq", "db", "health", "exporter", "beat", "config", "tasks",
                    "web", "dev", "chaos"):  # fmt: skip
        _run(plain_venv, ["beatflow", command, "--help"], _env(plain_venv), tmp_path)
    _run(plain_venv, ["celery", "-A", "beatflow", "worker", "--help"], _env(plain_venv), tmp_path)
    _run(plain_venv, ["celery", "-A", "beatflow", "beat", "--help"], _env(plain_venv), tmp_path)


@pytest.mark.parametrize(
    ("argv", "extra", "env_extra"),
    [
        (["beatflow", "web"], "web", {}),
        (["beatflow", "dev"], "embedded", {}),
        (["beatflow", "db", "upgrade"], "postgres",
         {"BEATFLOW_DATABASE_URL": "postgresql://u:pw@127.0.0.1:1/db"}),
        (["beatflow", "runs", "list", "--json"], "postgres",
         {"BEATFLOW_DATABASE_URL": "postgresql://u:pw@127.0.0.1:1/db"}),
    ],
    ids=["web", "dev", "db-upgrade-on-postgres", "runs-list-on-postgres"],
)  # fmt: skip
def test_a_plain_install_says_which_extra_a_command_needs(
    plain_venv: Path, tmp_path: Path, argv: list[str], extra: str, env_extra: dict[str, str]
) -> None:
    done = _call(plain_venv, argv, _env(plain_venv, **env_extra), tmp_path)
    assert done.returncode == 2, f"{argv} exited {done.returncode}:\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert f"pip install 'beatflow[{extra}]'" in done.stderr, done.stderr
    assert done.stdout == ""
    assert "pw@" not in done.stderr  # the password stays masked


def test_a_plain_install_runs_a_worker_a_beat_and_the_exporter_on_sqlite(
    plain_venv: Path, redis_url: str, tmp_path: Path, started: list[procs.Proc]
) -> None:
    metrics_port = services.free_port()
    env = _env(
        plain_venv,
        BEATFLOW_BROKER_URL=redis_url,
        BEATFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'beatflow.db'}",
        BEATFLOW_DAGS_FOLDER=str(ROOT / "dags"),
        BEATFLOW_QUEUES="default",
        BEATFLOW_METRICS_PORT=str(metrics_port),
    )
    cwd = tmp_path
    _run(plain_venv, ["beatflow", "db", "upgrade"], env, cwd)
    celery = ["celery", "-A", "beatflow"]
    worker_argv = [*celery, "worker", "-Q", "default", "--concurrency", "2", "-n", "core@%h"]
    worker = _start(plain_venv, "worker", worker_argv, env, cwd, started)
    beat_argv = [*celery, "beat", "--schedule", str(tmp_path / "celerybeat-schedule")]
    beat = _start(plain_venv, "beat", beat_argv, env, cwd, started)
    exporter = _start(plain_venv, "exporter", ["beatflow", "exporter"], env, cwd, started)
    node = f"core@{os.uname().nodename}"

    def healthy(proc: procs.Proc, *args: str) -> bool:
        _alive(proc)
        return _call(plain_venv, ["beatflow", "health", *args], env, cwd).returncode == 0

    procs.wait_for(
        lambda: healthy(worker, "worker", "--node", node, "--timeout", "2"),
        timeout=120, interval=0.5, message="the worker to answer ping",
    )  # fmt: skip
    procs.wait_for(lambda: healthy(beat, "beat"), timeout=60, interval=0.5, message="the beat")
    procs.wait_for(
        lambda: healthy(exporter, "exporter"), timeout=60, interval=0.5, message="the exporter"
    )
    out = _run(
        plain_venv,
        ["beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "120", "--json"],
        env,
        cwd,
    )
    assert json.loads(out)["state"] == "success", out
    assert "psycopg" not in worker.log() + beat.log()


def test_the_worker_beat_and_cli_entry_points_import_no_extra(
    image_venv: Path, tmp_path: Path
) -> None:
    """With every extra installed, a worker's, a beat's and the CLI's imports leave them alone:
    the extras are imported at the edges (beatflow web, beatflow dev, a PostgreSQL engine)."""
    script = f"""
import json, sys
from click.testing import CliRunner
from beatflow.app import get_app
import beatflow.scheduler.beat
import beatflow.cli
app = get_app()
app.loader.import_default_modules()
assert any(name.startswith("example_fan_out.") for name in app.tasks), sorted(app.tasks)
for argv in (["--help"], *([c, "--help"] for c in beatflow.cli.COMMANDS)):
    result = CliRunner().invoke(beatflow.cli.main, argv)
    assert result.exit_code == 0, (argv, result.output)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL_MODULES!r})))
"""
    env = _env(image_venv, BEATFLOW_DAGS_FOLDER=str(ROOT / "dags"))
    loaded = json.loads(_run(image_venv, ["python", "-c", script], env, tmp_path))
    assert loaded == []
    # The worker's own command line: `celery -A beatflow worker` loads the app and its plugins.
    script = f"""
import json, sys
from celery.bin.celery import main
sys.argv = ["celery", "-A", "beatflow", "worker", "--help"]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL_MODULES!r})))
"""
    out = _run(image_venv, ["python", "-c", script], env, tmp_path)
    assert json.loads(out.splitlines()[-1]) == []


def test_the_image_extras_run_every_deployed_command(
    image_venv: Path,
    redis_url: str,
    postgres_url: str,
    tmp_path: Path,
    started: list[procs.Proc],
) -> None:
    flower_port, metrics_port, web_port = (services.free_port() for _ in range(3))
    env = _env(
        image_venv,
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

    _run(image_venv, ["beatflow", "db", "upgrade"], env, cwd)

    def start(name: str, argv: list[str]) -> procs.Proc:
        return _start(image_venv, name, argv, env, cwd, started)

    def probe(what: str, *args: str) -> bool:
        return _call(image_venv, ["beatflow", "health", what, *args], env, cwd).returncode == 0

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
        _alive(worker)
        return probe("worker", "--node", node, "--timeout", "2")

    procs.wait_for(worker_up, timeout=120, interval=0.5, message="the worker to answer ping")

    def beat_up() -> bool:
        _alive(beat)
        return probe("beat")

    procs.wait_for(beat_up, timeout=60, interval=0.5, message="the beat health probe")

    flower_url = f"http://127.0.0.1:{flower_port}"

    def flower_up() -> bool:
        _alive(flower)
        return http_status(f"{flower_url}/healthcheck") == 200

    procs.wait_for(flower_up, timeout=60, interval=0.5, message="Flower to answer")
    assert http_status(f"{flower_url}/api/workers") == 401
    assert http_status(f"{flower_url}/api/workers", ("ops", "plain-install-pw")) == 200
    assert probe("flower")

    metrics = f"http://127.0.0.1:{metrics_port}/metrics"

    def exporter_up() -> bool:
        _alive(exporter)
        return http_status(metrics) == 200

    procs.wait_for(exporter_up, timeout=60, interval=0.5, message="the exporter's /metrics")
    with urllib.request.urlopen(metrics, timeout=5) as response:  # local URL
        assert b"celery_" in response.read()
    assert probe("exporter")

    web_url = f"http://127.0.0.1:{web_port}"

    def web_up() -> bool:
        _alive(web)
        return http_status(f"{web_url}/healthz") == 200

    procs.wait_for(web_up, timeout=60, interval=0.5, message="beatflow web's /healthz")
    assert http_status(f"{web_url}/api/v1/dags") == 401
    assert probe("web")

    # `helm test`'s ping, and the prune CronJob's command.
    _run(image_venv, ["celery", "-A", "beatflow", "inspect", "ping", "--timeout", "10"], env, cwd)
    _run(image_venv, ["beatflow", "db", "prune", "--older-than", "30d"], env, cwd)

    # A DAG run end to end through the plain install's own CLI.
    out = _run(
        image_venv,
        ["beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "120"],
        env,
        cwd,
    )
    assert "success" in out, out
