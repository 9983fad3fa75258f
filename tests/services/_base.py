"""What the service helpers share: errors, free ports, waiting, and the records that let a
later run reap servers whose owner died."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

import psutil
from filelock import FileLock

# Each owned server writes a record here naming its owner (this pytest process): a later run
# reaps servers whose owner died (SIGKILL, OOM) before it could stop them.
STATE_DIR = Path(tempfile.gettempdir()) / "beatflow-test-services"


def source_build_lock() -> FileLock:
    """Held while a test builds beatflow's wheel from the source tree (the plain install, the
    container image): pip builds in the tree (build/, egg-info), so two xdist processes must not
    build at once."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    return FileLock(STATE_DIR / "source-build.lock")


class ServiceError(Exception):
    """Raised when a service cannot be reached or started."""


def force_throwaway() -> bool:
    """True when BEATFLOW_TEST_FORCE_THROWAWAY asks for throwaway servers even if others run."""
    return os.environ.get("BEATFLOW_TEST_FORCE_THROWAWAY", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}")


# ------------------------------------------------------------------ orphan bookkeeping


def _record_path(name: str) -> Path:
    return STATE_DIR / f"{os.getpid()}-{name}.json"


def write_record(name: str, pid: int, workdir: Path) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    proc = psutil.Process(pid)
    owner = psutil.Process(os.getpid())
    record = {
        "owner_pid": owner.pid,
        "owner_started": owner.create_time(),
        "pid": pid,
        "started": proc.create_time(),
        "workdir": str(workdir),
    }
    _record_path(name).write_text(json.dumps(record))


def drop_record(name: str) -> None:
    _record_path(name).unlink(missing_ok=True)


def _same_process(pid: int, started: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return proc if abs(proc.create_time() - started) < 0.01 else None
    except psutil.Error:
        return None


def terminate_tree(proc: psutil.Process, grace: float = 5.0) -> None:
    """SIGTERM a process and its descendants, SIGKILL whatever outlives ``grace`` seconds."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)


def reap_orphans() -> list[int]:
    """Stop servers whose owning test process died without stopping them; return their pids."""
    reaped: list[int] = []
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if _same_process(record["owner_pid"], record["owner_started"]) is not None:
            continue  # its owner is alive (another pytest run): not ours to touch
        proc = _same_process(record["pid"], record["started"])
        if proc is not None:
            terminate_tree(proc)
            reaped.append(record["pid"])
        shutil.rmtree(record["workdir"], ignore_errors=True)
        path.unlink(missing_ok=True)
    return reaped


class Owned(Protocol):
    def close(self) -> None: ...


# Every server this process started, stopped by ``stop_all`` at session end.
OWNED: list[Owned] = []


class OwnedServer:
    """A server process of our own on a free port, in a session of its own with its output in a
    log in its work folder, on record (for ``reap_orphans``) while it runs; the subclass says
    how to start it, how to tell it answers, and how to stop (cleanly) and kill it (a crash).
    ``close`` kills it and deletes its files."""

    port: int
    workdir: Path
    name: str
    process: subprocess.Popen[bytes] | None
    log_name: ClassVar[str] = "server.log"
    start_timeout: ClassVar[float] = 10.0

    def command(self) -> list[str]:
        raise NotImplementedError

    def command_env(self) -> dict[str, str] | None:
        return None  # this process's environment

    def command_cwd(self) -> Path | None:
        return None  # this process's folder

    def answers(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        """What ``start`` waits for, in its timeout error."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (nothing if it runs) and wait until it answers; ServiceError with
        the log's tail if it exits instead."""
        if self.running:
            return
        command = self.command()
        log = open(self.workdir / self.log_name, "ab")  # noqa: SIM115 - handed to the child
        with log:
            process = subprocess.Popen(
                command,
                env=self.command_env(),
                cwd=self.command_cwd(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.process = process
        write_record(self.name, process.pid, self.workdir)
        wait_until(
            lambda: process.poll() is not None or self.answers(),
            self.start_timeout,
            self.describe(),
        )
        if process.poll() is not None:
            tail = (self.workdir / self.log_name).read_text(errors="replace")[-2000:]
            raise ServiceError(f"{command[0]} exited at start on port {self.port}:\n{tail}")

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
