"""Real beatflow processes for tests: Celery workers (and beats) as subprocesses that tests can
wait on, kill and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEATFLOW = str(Path(sys.executable).with_name("beatflow"))  # the installed command


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def beatflow_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
            "BEATFLOW_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def run_beatflow(
    env: Mapping[str, str], *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """The `beatflow` command in a child process, to its end: this process's environment
    without its BEATFLOW_* variables, then ``env``; its output captured as text."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    clean.update(env)
    return subprocess.run(
        [BEATFLOW, *args], env=clean, capture_output=True, text=True, timeout=timeout, check=False
    )


def start_beatflow(env: Mapping[str, str], out: Path, *args: str) -> subprocess.Popen[bytes]:
    """The `beatflow` command in a child process, left running (``run_beatflow``'s environment):
    its stdout written to ``out``.stdout and its stderr to ``out``.stderr, to read while it runs."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    clean.update(env)
    with open(f"{out}.stdout", "wb") as stdout, open(f"{out}.stderr", "wb") as stderr:
        return subprocess.Popen([BEATFLOW, *args], env=clean, stdout=stdout, stderr=stderr)


@dataclass
class Proc:
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def start(self) -> Proc:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(ROOT),
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group (the process and its pool children)."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def celery_worker(
    tmp_path: Path,
    env: Mapping[str, str],
    *,
    queues: str = "default",
    concurrency: int = 2,
    name: str | None = None,
    pool: str = "prefork",
    extra_args: tuple[str, ...] = (),
) -> Proc:
    node = name or f"w{uuid.uuid4().hex[:6]}"
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "beatflow",
        "worker",
        "-l",
        "info",
        "-E",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-Q",
        queues,
        "-n",
        f"{node}@%h",
        "--without-mingle",
        "--without-gossip",
        *extra_args,
    ]
    return Proc(argv, beatflow_env(env), tmp_path / f"worker-{node}.log", name=node)


def wait_worker_ready(app: object, proc: Proc, timeout: float = 60.0) -> None:
    def ready() -> bool:
        if proc.popen is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{proc.log()[-3000:]}")
        replies = app.control.ping(timeout=0.5)  # type: ignore[attr-defined]
        return any(proc.name in next(iter(r)) for r in replies)

    wait_for(ready, timeout=timeout, message=f"worker {proc.name} to answer ping")
