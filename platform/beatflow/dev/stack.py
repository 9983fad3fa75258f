"""The embedded stack: decide the broker and database URLs (given ones, else a local Redis and a
SQLite file under ``.beatflow/``), start Redis, a worker, two beats, Flower and the exporter as
supervised children, wait until the worker answers, and stop every one of them."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from celery import Celery

from beatflow.app import create_app
from beatflow.dag.loader import load_dags
from beatflow.dev import redis as local_redis
from beatflow.dev.processes import Child, Supervisor, reap_stale
from beatflow.errors import DevStackError
from beatflow.settings import Settings
from beatflow.store.engine import create_engine
from beatflow.store.schema import migrate

log = logging.getLogger(__name__)

STATE_DIR = ".beatflow"


class StopRequested(BaseException):
    """Raised at the next safe point after ``DevStack.request_stop`` (a signal arrived)."""


@dataclass(frozen=True, slots=True)
class StackInfo:
    """Where to look once the stack is up."""

    broker_url: str
    database_url: str
    flower_url: str
    flower_user: str
    flower_password: str
    metrics_url: str
    log_dir: Path
    worker_node: str
    queues: tuple[str, ...]
    web_url: str = ""
    web_user: str = ""
    web_password: str = ""


@dataclass(frozen=True, slots=True)
class Listener:
    """An HTTP child of the stack: how to start it on a port, and the URL that answers once
    it is up (``{port}`` in it); ``variable`` names the setting that fixes its port."""

    name: str
    argv_for: Callable[[int], list[str]]
    url_template: str
    port: int
    variable: str


@dataclass
class DevStack:
    """One embedded stack rooted at ``cwd``; ``environ`` is what children inherit and
    ``settings`` what it says (the caller builds them once, from the same environment)."""

    environ: Mapping[str, str]
    settings: Settings
    cwd: Path
    echo: Callable[[str], None] = print
    grace: float = 15.0
    supervisor: Supervisor = field(init=False)
    redis_child: Child | None = field(default=None, init=False)
    info: StackInfo | None = field(default=None, init=False)
    child_env: dict[str, str] = field(default_factory=dict, init=False)
    child_settings: Settings | None = field(default=None, init=False)
    _reported_dead: set[str] = field(default_factory=set, init=False)
    stop_requested: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        self.cwd = self.cwd.resolve()
        self.state_dir = self.cwd / STATE_DIR
        self.supervisor = Supervisor(self.state_dir / "run", self.state_dir / "logs")

    def request_stop(self) -> None:
        """Ask a start or a wait in progress to give up at its next check (signal-safe).

        Signal handlers only set this flag: an exception raised from a handler can land inside
        a library between acquiring a lock and releasing it, or between forking a child and
        recording it, and the stop then hangs or leaves an orphan.
        """
        self.stop_requested.set()

    def check_stop(self) -> None:
        if self.stop_requested.is_set():
            raise StopRequested

    # ------------------------------------------------------------------ start

    def start(self, *, with_beat: bool = True, ready_timeout: float = 60.0) -> StackInfo:
        """Start everything and wait until the worker answers ping; stop it all on failure."""
        self.supervisor.acquire()
        for what in reap_stale(self.supervisor.run_dir, grace=self.grace):
            self.echo(f"reaped {what}, left running by an earlier `beatflow dev` that was killed")
        try:
            self.info = self._start(with_beat, ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self.info

    def _start(self, with_beat: bool, ready_timeout: float) -> StackInfo:
        settings = self.settings
        env = dict(self.environ)
        env["PYTHONUNBUFFERED"] = "1"

        if self.environ.get("BEATFLOW_BROKER_URL"):
            broker_url = settings.broker_url
        else:
            broker_url = self._start_redis()
            env["BEATFLOW_BROKER_URL"] = broker_url
            settings = settings.replace(broker_url=broker_url)
        if self.environ.get("BEATFLOW_DATABASE_URL"):
            database_url = settings.database_url
        else:
            database_url = f"sqlite:///{self.state_dir / 'beatflow.db'}"
            env["BEATFLOW_DATABASE_URL"] = database_url
            settings = settings.replace(database_url=database_url)

        flower_port = self._port(settings.flower_port, "BEATFLOW_FLOWER_PORT")
        metrics_port = self._port(settings.metrics_port, "BEATFLOW_METRICS_PORT")
        web_port = self._port(settings.web_port, "BEATFLOW_WEB_PORT")
        settings_password = settings.flower_password
        password = settings_password or secrets.token_urlsafe(12)
        web_password = settings.web_password or password  # one generated login for both UIs
        env.update(BEATFLOW_WEB_PORT=str(web_port), BEATFLOW_WEB_PASSWORD=web_password)
        env.update(
            BEATFLOW_FLOWER_PORT=str(flower_port),
            BEATFLOW_FLOWER_PASSWORD=password,
            BEATFLOW_METRICS_PORT=str(metrics_port),
            # Flower reads FLOWER_* options from the environment: the password stays out of `ps`.
            FLOWER_BASIC_AUTH=f"{settings.flower_user}:{password}",
        )
        settings = settings.replace(
            flower_port=flower_port, flower_password=password, metrics_port=metrics_port
        )
        self.child_env = env
        self.child_settings = settings
        self._upgrade_database(settings.database_url)

        queues = self._queues(settings)
        node = f"dev-{os.getpid()}@%h"  # unique, should the broker be shared
        celery = [sys.executable, "-m", "celery", "-A", "beatflow"]
        self._spawn(
            "worker",
            [
                *celery,
                "worker",
                "-l",
                "info",
                "-E",
                "--concurrency",
                "2",
                "-Q",
                ",".join(queues),
                "-n",
                node,
            ],
        )
        if with_beat:
            for i in (1, 2):
                run = self.supervisor.run_dir
                self._spawn(
                    f"beat-{i}",
                    [
                        *celery,
                        "beat",
                        "-l",
                        "info",
                        "--schedule",
                        str(run / f"beat-{i}.schedule"),
                        "--pidfile",
                        str(run / f"beat-{i}.celery.pid"),
                    ],
                )
        exporter = "import sys; from beatflow.cli import main; sys.exit(main())"
        cli = [sys.executable, "-c", exporter]  # `beatflow …` with this interpreter
        flower_port, metrics_port, web_port = self._start_listeners(
            Listener(
                "flower",
                lambda port: [*celery, "flower", f"--port={port}", "--address=127.0.0.1"],
                "http://127.0.0.1:{port}/",
                flower_port,
                "BEATFLOW_FLOWER_PORT",
            ),
            Listener(
                "exporter",
                lambda _port: [*cli, "exporter"],
                "http://127.0.0.1:{port}/metrics",
                metrics_port,
                "BEATFLOW_METRICS_PORT",
            ),
            Listener(
                "web",
                lambda port: [*cli, "web", "--host=127.0.0.1", f"--port={port}"],
                "http://127.0.0.1:{port}/healthz",
                web_port,
                "BEATFLOW_WEB_PORT",
            ),
        )
        flower_url = f"http://127.0.0.1:{flower_port}/"
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

        worker_node = node.replace("%h", socket.gethostname())
        self._wait_for_worker(settings, worker_node, ready_timeout)
        return StackInfo(
            broker_url=broker_url,
            database_url=database_url,
            flower_url=flower_url,
            flower_user=settings.flower_user,
            # a password the user chose is theirs to know; only a generated one is printed
            flower_password=password if not settings_password else "(BEATFLOW_FLOWER_PASSWORD)",
            metrics_url=metrics_url,
            log_dir=self.supervisor.log_dir,
            worker_node=worker_node,
            queues=queues,
            web_url=f"http://127.0.0.1:{web_port}/",
            web_user=settings.web_user,
            web_password=(
                "(BEATFLOW_WEB_PASSWORD)"
                if settings.web_password
                else "(BEATFLOW_FLOWER_PASSWORD)"  # the web login reuses the one the user chose
                if settings_password
                else web_password
            ),
        )

    def _start_redis(self) -> str:
        binary = local_redis.redis_binary()
        port = local_redis.free_port()
        workdir = self.state_dir / "redis"
        workdir.mkdir(parents=True, exist_ok=True)
        self.redis_child = self._spawn("redis", local_redis.redis_argv(binary, port, workdir))
        url = f"redis://127.0.0.1:{port}/0"
        if not local_redis.wait_for_redis(url, 15.0, self.stop_requested.is_set):
            self.check_stop()
            raise DevStackError(
                f"Redis ({binary}) did not answer on port {port} within 15s; see "
                f"{self.redis_child.log_path}:\n{self.redis_child.log_tail()}"
            )
        return url

    def _spawn(self, name: str, argv: list[str]) -> Child:
        self.check_stop()
        env = self.child_env or dict(self.environ)
        return self.supervisor.start(name, argv, env, self.cwd)

    def _port(self, configured: int, variable: str) -> int:
        if self.environ.get(variable):
            return configured
        return local_redis.free_port(preferred=configured)

    def _upgrade_database(self, url: str) -> None:
        engine = create_engine(url)
        try:
            migrate(engine)
        finally:
            engine.dispose()

    def _queues(self, settings: Settings) -> tuple[str, ...]:
        """The configured queues plus any queue a task in the dags folder names."""
        queues = list(settings.queues)
        try:
            bag = load_dags(self.cwd / settings.dags_folder)
        except Exception as exc:  # noqa: BLE001 - the worker reports DAG errors by file and line
            log.debug("could not scan the dags folder for queues: %s", exc)
            return tuple(queues)
        for dag in bag.dags.values():
            for task in getattr(dag, "tasks", {}).values():
                queue = getattr(task, "queue", None)
                if queue and queue not in queues:
                    queues.append(queue)
        return tuple(queues)

    def ping_app(self, settings: Settings) -> Celery:
        """An app of the composition root for ``settings`` (DAGs not loaded): pings, triggers."""
        return create_app(settings, load_dags=False)

    def _wait_for_worker(self, settings: Settings, node: str, timeout: float) -> None:
        app = self.ping_app(settings)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.check_stop()
                self._fail_if_dead("worker")
                replies = app.control.ping(destination=[node], timeout=1.0)
                if any(node in reply for reply in replies):
                    return
        finally:
            app.close()
        raise DevStackError(
            f"the worker did not answer ping within {timeout:.0f}s; see "
            f"{self.supervisor.log_dir / 'worker.log'}"
        )

    def _start_listeners(self, *listeners: Listener) -> list[int]:
        """Start the HTTP children all at once (each imports for a second or two), then wait
        for each; one whose port another process took in the meantime starts again on a new
        port. Returns the ports they listen on, in order."""
        started = []
        for listener in listeners:
            self.child_env[listener.variable] = str(listener.port)
            started.append(self._spawn(listener.name, listener.argv_for(listener.port)))
        return [
            self._listening(listener, child)
            for listener, child in zip(listeners, started, strict=True)
        ]

    def _listening(self, listener: Listener, child: Child) -> int:
        port = listener.port
        for attempt in range(3):
            if attempt:
                self.child_env[listener.variable] = str(port)
                child = self._spawn(listener.name, listener.argv_for(port))
            if self._wait_for_http(listener.url_template.format(port=port), child, timeout=30.0):
                return port
            if self.environ.get(listener.variable) or "Address already in use" not in (
                child.log_tail()
            ):
                break
            self.supervisor.forget(child)
            port = local_redis.free_port()
        raise DevStackError(
            f"{listener.name} exited with code {child.returncode()} at start; its log "
            f"({child.log_path}) ends with:\n{child.log_tail()}"
        )

    def _wait_for_http(self, url: str, child: Child, timeout: float) -> bool:
        """True once ``url`` answers (any HTTP status), False if ``child`` exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_stop()
            if not child.is_running():
                return False
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return True
            except urllib.error.HTTPError:
                return True  # 401 from basic auth: it is up
            except OSError:
                time.sleep(0.1)
        self.echo(f"warning: {child.name} did not answer at {url} within {timeout:.0f}s")
        return True

    def _fail_if_dead(self, name: str) -> None:
        for child in self.supervisor.children:
            if child.name == name and not child.is_running():
                raise DevStackError(
                    f"{name} exited with code {child.returncode()} at start; its log "
                    f"({child.log_path}) ends with:\n{child.log_tail()}"
                )

    # ------------------------------------------------------------------ run and stop

    def report_dead_children(self) -> list[Child]:
        """Print each child that exited since the last call, with the end of its log."""
        dead = [c for c in self.supervisor.dead_children() if c.name not in self._reported_dead]
        for child in dead:
            self._reported_dead.add(child.name)
            self.echo(
                f"{child.name} exited with code {child.returncode()}; the end of "
                f"{child.log_path}:\n{child.log_tail(1500)}"
            )
        return dead

    def stop(self) -> None:
        """Stop the apps first (the worker shuts down warm while Redis answers), then Redis."""
        apps = [c for c in self.supervisor.children if c is not self.redis_child]
        self.supervisor.stop(apps, grace=self.grace)
        self.supervisor.stop_all(grace=self.grace)
        for path in self.supervisor.run_dir.glob("*.celery.pid"):
            path.unlink(missing_ok=True)
        self.supervisor.release()
