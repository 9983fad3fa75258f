"""Supervised child processes: each runs in a process group of its own, is recorded in a pid file
under ``.beatflow/run/`` (pid, start time, command), and is stopped group-wide (SIGTERM, then
SIGKILL after a grace period). Pid files a killed earlier run left behind are reaped."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING

from beatflow.errors import DevStackError

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

PID_SUFFIX = ".pid.json"


@dataclass
class Child:
    """One supervised child process, its log file and its pid file."""

    name: str
    argv: list[str]
    log_path: Path
    pid_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Supervisor:
    """Starts children in their own process groups and stops every one of them."""

    def __init__(self, run_dir: Path, log_dir: Path) -> None:
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.children: list[Child] = []
        self._lock: IO[str] | None = None
        run_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)

    def acquire(self) -> None:
        """Own ``run_dir``: a second supervisor there (still alive) is refused, not reaped.

        The kernel drops the lock when its holder dies, even by SIGKILL, so a killed run never
        blocks the next one; its pid files are then stale and ``reap_stale`` may act on them.
        """
        path = self.run_dir / "supervisor.lock"
        handle = open(path, "a+")  # noqa: SIM115 - held for the supervisor's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise DevStackError(
                f"another `beatflow dev` (pid {holder}) is running in "
                f"{self.run_dir.parent.parent}; stop it (Ctrl-C) or start this one elsewhere"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle

    def release(self) -> None:
        if self._lock is not None:
            (self.run_dir / "supervisor.lock").unlink(missing_ok=True)
            self._lock.close()
            self._lock = None

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> Child:
        child = Child(
            name=name,
            argv=list(argv),
            log_path=self.log_dir / f"{name}.log",
            pid_path=self.run_dir / f"{name}{PID_SUFFIX}",
        )
        with open(child.log_path, "ab") as out:
            # A session of its own: Ctrl-C in the terminal reaches only us, and we stop the
            # whole group (a prefork worker's pool processes included) in order.
            child.process = subprocess.Popen(
                child.argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.children.append(child)
            _write_pid_file(child.pid_path, child.pid, child.argv)
        log.debug("started %s (pid %d): %s", name, child.pid, " ".join(child.argv))
        return child

    def forget(self, child: Child) -> None:
        """Drop a child that already exited (reaped, its pid file removed)."""
        if child.process is not None:
            child.process.wait()
        child.pid_path.unlink(missing_ok=True)
        if child in self.children:
            self.children.remove(child)

    def dead_children(self) -> list[Child]:
        return [c for c in self.children if not c.is_running()]

    def stop_all(self, grace: float = 15.0) -> None:
        """Stop every child still recorded, last started first."""
        self.stop(list(self.children), grace=grace)

    def stop(self, children: Sequence[Child], grace: float = 15.0) -> None:
        """SIGTERM each child's group, SIGKILL what outlives ``grace``; drop their pid files."""
        for child in reversed(children):
            if child.is_running():
                _signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in reversed(children):
            if child.process is None:
                continue
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s (pid %d) ignored SIGTERM for %.0fs; killing it",
                    child.name,
                    child.pid,
                    grace,
                )
        for child in children:
            if child.process is None:
                continue
            # The group may outlive its leader (pool processes): make sure it is gone too.
            _signal_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(5)
            child.pid_path.unlink(missing_ok=True)
            if child in self.children:
                self.children.remove(child)


def _psutil() -> ModuleType:
    """psutil, imported only by the embedded stack: a plain install (workers, beats, Flower,
    the exporter) never needs it, so it comes with the ``embedded`` extra, not the runtime."""
    try:
        import psutil
    except ImportError as exc:
        raise DevStackError(
            "`beatflow dev` needs psutil to supervise its processes: "
            "pip install 'beatflow[embedded]' (or pip install psutil)"
        ) from exc
    module: ModuleType = psutil  # untyped library
    return module


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _write_pid_file(path: Path, pid: int, argv: Sequence[str]) -> None:
    ps = _psutil()
    try:
        started = ps.Process(pid).create_time()
    except ps.Error:  # it died at once: the caller sees that from its return code
        started = 0.0
    # Written whole or not at all: a reader never sees half a record.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"pid": pid, "started": started, "argv": list(argv)}))
    tmp.replace(path)


def reap_stale(run_dir: Path, grace: float = 10.0, last: Sequence[str] = ("redis",)) -> list[str]:
    """Stop processes recorded by a previous run that was killed; remove every stale pid file.

    A pid is only signalled when the process still has the recorded start time, so a pid the
    kernel has since reused for something else is left alone. Children named in ``last`` (the
    broker) go after the others, so a worker can still shut down warm. Returns what was reaped.
    """
    reaped: list[str] = []
    if not run_dir.is_dir():
        return reaped
    ps = _psutil()
    found: list[tuple[str, psutil.Process]] = []
    for path in sorted(run_dir.glob(f"*{PID_SUFFIX}")):
        name = path.name[: -len(PID_SUFFIX)]
        try:
            record = json.loads(path.read_text())
            proc = ps.Process(int(record["pid"]))
            if abs(proc.create_time() - float(record["started"])) > 0.01:
                raise ps.NoSuchProcess(int(record["pid"]))
            found.append((name, proc))
        except (OSError, ValueError, KeyError, TypeError, ps.Error):
            pass
        path.unlink(missing_ok=True)
    for batch in ([f for f in found if f[0] not in last], [f for f in found if f[0] in last]):
        victims: list[psutil.Process] = []
        for name, proc in batch:
            with contextlib.suppress(ps.Error):
                victims += [proc, *proc.children(recursive=True)]
            _signal_group(proc.pid, signal.SIGTERM)
            reaped.append(f"{name} (pid {proc.pid})")
        _, alive = ps.wait_procs(victims, timeout=grace)
        for proc in alive:
            with contextlib.suppress(ps.Error):
                _signal_group(proc.pid, signal.SIGKILL)
                proc.kill()
        ps.wait_procs(alive, timeout=5)
    # Celery's own pid files (beat --pidfile) of processes that are gone.
    for path in run_dir.glob("*.celery.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(path.read_text().strip() or 0)
            if pid <= 0 or not ps.pid_exists(pid):
                path.unlink(missing_ok=True)
    return reaped
