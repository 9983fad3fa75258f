"""Run `beatflow dev` as a real subprocess in a fresh directory and watch its output."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
BEATFLOW = str(Path(sys.executable).parent / "beatflow")


class DevProcess:
    """A `beatflow dev` subprocess: its output lines, its children, and ways to stop it."""

    def __init__(self, cwd: Path, args: list[str], env: dict[str, str]) -> None:
        self.cwd = cwd
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [BEATFLOW, "dev", *args],
            cwd=cwd,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def run_dir(self) -> Path:
        return self.cwd / ".beatflow" / "run"

    def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                self._reader.join(5)
                if any(text in line for line in self.lines):
                    return
                pytest.fail(f"beatflow dev exited {self.proc.returncode}:\n{self.output}")
            time.sleep(0.05)
        pytest.fail(f"no {text!r} within {timeout}s:\n{self.output}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.wait_for_line("beatflow dev: ready", timeout)

    def descendants(self) -> list[psutil.Process]:
        """Every process under `beatflow dev`: Redis, worker (with its pool), beats, Flower."""
        return psutil.Process(self.proc.pid).children(recursive=True)

    def recorded_pids(self) -> dict[str, int]:
        return {
            p.name.removesuffix(".pid.json"): json.loads(p.read_text())["pid"]
            for p in self.run_dir.glob("*.pid.json")
        }

    def pid_files(self) -> list[str]:
        return sorted(p.name for p in self.run_dir.glob("*pid*"))

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def processes_in(cwd: Path) -> list[psutil.Process]:
    """Every live process whose working directory is ``cwd`` (what a stack there started)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if Path(proc.cwd()) == cwd and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def gone(procs: list[psutil.Process], timeout: float = 60.0) -> list[psutil.Process]:
    """The processes still alive after waiting up to ``timeout`` seconds."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def dev_env() -> dict[str, str]:
    """The environment of a `beatflow dev` with nothing configured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env["BEATFLOW_LOG_FORMAT"] = "text"
    return env


@pytest.fixture
def dev_dir(tmp_path: Path) -> Path:
    """A fresh working directory with the example DAGs in ``dags/``."""
    (tmp_path / "dags").mkdir()
    for path in (REPO / "dags").glob("example_*.py"):
        shutil.copy(path, tmp_path / "dags" / path.name)
    return tmp_path


@pytest.fixture
def start_dev(dev_dir: Path, dev_env: dict[str, str]) -> Iterator[Callable[..., DevProcess]]:
    """Factory: start `beatflow dev ARGS` in ``dev_dir``; anything left is killed afterwards."""
    started: list[DevProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> DevProcess:
        dev = DevProcess(dev_dir, list(args), env or dev_env)
        started.append(dev)
        return dev

    yield start
    for dev in started:
        if dev.proc.poll() is None:
            dev.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                dev.wait(60)
    # Last resort, so a failed test cannot leave a stack running: reap what pid files name.
    from beatflow.dev.processes import reap_stale

    reap_stale(dev_dir / ".beatflow" / "run")
