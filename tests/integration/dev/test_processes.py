"""The supervisor under beatflow dev: whole process groups stop, SIGTERM-deaf ones get SIGKILL,
and stale pid files are reaped only when they still name the very process that was recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from beatflow.dev.processes import PID_SUFFIX, Supervisor, reap_stale
from beatflow.errors import DevStackError

# A parent that ignores SIGTERM and a child of it in the same process group.
DEAF = (
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
)


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_stop_kills_a_sigterm_deaf_child_and_its_group_after_the_grace(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "run", tmp_path / "logs")
    child = supervisor.start("deaf", [sys.executable, "-c", DEAF], dict(os.environ), tmp_path)
    leader = psutil.Process(child.pid)
    _wait_for(lambda: len(leader.children()) == 1)
    group = [leader, *leader.children()]

    started = time.monotonic()
    supervisor.stop_all(grace=0.5)

    assert time.monotonic() - started < 30  # the 0.5 s grace, then SIGKILL: not a long wait
    _, alive = psutil.wait_procs(group, timeout=30)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    assert list((tmp_path / "run").glob(f"*{PID_SUFFIX}")) == []


def test_reap_stale_stops_recorded_processes_but_not_a_reused_pid(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        created = psutil.Process(left.pid).create_time()
        (run / f"worker{PID_SUFFIX}").write_text(
            json.dumps({"pid": left.pid, "started": created, "argv": ["x"]})
        )
        # Same pid number as the bystander, other start time: what a reused pid looks like.
        (run / f"beat-1{PID_SUFFIX}").write_text(
            json.dumps({"pid": bystander.pid, "started": created - 1000, "argv": ["x"]})
        )
        (run / f"flower{PID_SUFFIX}").write_text("not json")

        reaped = reap_stale(run, grace=5)

        assert reaped == [f"worker (pid {left.pid})"]
        assert left.wait(30) is not None
        assert bystander.poll() is None
        assert list(run.glob(f"*{PID_SUFFIX}")) == []
    finally:
        for proc in (left, bystander):
            proc.kill()
            proc.wait(10)


def test_a_live_supervisor_keeps_a_second_one_out_of_its_directory(tmp_path: Path) -> None:
    first = Supervisor(tmp_path / "run", tmp_path / "logs")
    first.acquire()
    try:
        with pytest.raises(DevStackError, match=f"pid {os.getpid()}"):
            Supervisor(tmp_path / "run", tmp_path / "logs").acquire()
    finally:
        first.release()
    second = Supervisor(tmp_path / "run", tmp_path / "logs")
    second.acquire()
    second.release()
