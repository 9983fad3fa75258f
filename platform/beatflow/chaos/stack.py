"""The beatflow processes of a chaos run, each a child in its own process group so a fault can
SIGKILL, SIGTERM, SIGSTOP or SIGCONT it (with its pool children) and the run can start it again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    """One beatflow process: a worker, a beat or the exporter."""

    name: str
    kind: str  # "worker", "beat" or "exporter"
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    paused: bool = False

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.paused = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.is_running():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
        if sig == signal.SIGSTOP:
            self.paused = True
        elif sig == signal.SIGCONT:
            self.paused = False

    def last_error(self) -> str:
        """The last critical or error line of the child's log, cut short ('' if none)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - 65536))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        for line in reversed(lines):
            if '"critical"' in line or "Unrecoverable error" in line or "CRITICAL" in line:
                start = line.find('"message": "')
                text = line[start + 12 :].split('", "', 1)[0] if start >= 0 else line
                return text.replace('\\"', '"')[:160]
        return ""

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM (a warm shutdown for a worker), then SIGKILL after ``grace`` seconds."""
        if not self.is_running():
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        assert self.process is not None
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Stack:
    """Workers, beats and the exporter sharing one environment (the run's settings)."""

    env: Mapping[str, str]
    log_dir: Path
    workers: list[Child] = field(default_factory=list)
    beats: list[Child] = field(default_factory=list)
    exporter: Child | None = None

    def _child(self, name: str, kind: str, argv: list[str], extra: Mapping[str, str]) -> Child:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
        env.update(self.env)
        env.update({"BEATFLOW_INSTANCE": name, "PYTHONUNBUFFERED": "1", **extra})
        return Child(name, kind, argv, env, self.log_dir / f"{name}.log")

    def add_worker(self, name: str, extra: Mapping[str, str] | None = None) -> Child:
        argv = [
            sys.executable, "-m", "celery", "-A", "beatflow", "worker", "-l", "info", "-E",
            "-c", "2", "-n", f"{name}@%h", "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        child = self._child(name, "worker", argv, extra or {})
        self.workers.append(child)
        return child

    def add_beat(self, name: str) -> Child:
        argv = [sys.executable, "-m", "celery", "-A", "beatflow", "beat", "-l", "info"]
        child = self._child(name, "beat", argv, {})
        self.beats.append(child)
        return child

    def add_exporter(self, port: int) -> Child:
        argv = [sys.executable, "-c", "from beatflow.cli import main; main()", "exporter"]
        self.exporter = self._child(
            "exporter", "exporter", argv, {"BEATFLOW_METRICS_PORT": str(port)}
        )
        return self.exporter

    @property
    def children(self) -> list[Child]:
        extra = [self.exporter] if self.exporter is not None else []
        return [*self.workers, *self.beats, *extra]

    def start_all(self) -> None:
        for child in self.children:
            child.start()

    def revive(self) -> list[str]:
        """Start every child that is not running (a supervisor's restart, as Kubernetes does for
        a container that exits); returns, for each, its name and why it died (its last error)."""
        started = []
        for child in self.children:
            if not child.is_running():
                why = child.last_error()
                child.start()
                started.append(f"{child.name} ({why})" if why else child.name)
        return started

    def stop_all(self) -> None:
        for child in self.children:
            child.signal(signal.SIGCONT)
        for child in self.children:
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
