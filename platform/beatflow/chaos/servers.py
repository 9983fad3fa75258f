"""The Redis and PostgreSQL servers a chaos run owns: started on free ports under the run's work
folder, and stopped, restarted or wiped on purpose by the faults."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from beatflow.errors import ChaosSetupError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise ChaosSetupError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


@dataclass
class ChaosRedis:
    """A redis-server with append-only persistence, so a restart keeps queues and locks."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ChaosSetupError("redis-server not found: apt-get install redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
        ]
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        wait_port(self.port, 20, "redis-server")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=20)
        self.process = None

    def restart(self, *, empty: bool = False) -> None:
        """Kill and start again; ``empty`` also deletes the append-only files (no persistence)."""
        self.stop()
        if empty:
            for path in self.workdir.iterdir():
                if path.name.startswith(("appendonly", "dump")):
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        self.start()

    def command(self, *args: str) -> str:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ChaosSetupError("redis-cli not found: apt-get install redis-tools")
        out = subprocess.run(
            [cli, "-p", str(self.port), *args], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip()


def _postgres_bindir() -> Path:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name))
    for d in reversed(dirs):
        if (Path(d) / "initdb").exists():
            return Path(d)
    raise ChaosSetupError(
        "no PostgreSQL server binaries (initdb): apt-get install postgresql, or pass "
        "--database-url to use an existing server (the PostgreSQL faults are then skipped)"
    )


def _os_user() -> str | None:
    """initdb refuses root: run the cluster as ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ChaosSetupError("running as root needs the OS user 'postgres' for initdb") from exc
    return "postgres"


@dataclass
class ChaosPostgres:
    """A PostgreSQL cluster of the run's own, stopped and started again on the same port."""

    workdir: Path
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.bindir = _postgres_bindir()
        self.user = _os_user()
        self.owned_dir: Path | None = None
        if self.user is not None:
            # The postgres user must reach its data folder: a private folder of root's (a test's
            # tmp_path, a home) is closed to it, so the cluster lives in a /tmp folder of its own.
            self.owned_dir = Path(tempfile.mkdtemp(prefix="beatflow-chaos-pg-"))
            self.workdir = self.owned_dir

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self.user,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise ChaosSetupError(f"{args[0]} failed: {result.stdout}{result.stderr}")

    def init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.workdir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.workdir} -c max_connections=300"
        self._run(
            "pg_ctl", "-D", str(self.datadir), "-l", str(self.workdir / "pg.log"), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self) -> None:
        if (self.datadir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "60", "stop")

    def close(self) -> None:
        with contextlib.suppress(ChaosSetupError, subprocess.TimeoutExpired):
            self.stop()
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)
