"""A real Redis Sentinel set for tests: a master, a replica and one Sentinel (Debian's
``redis-server --sentinel``) on free ports, in a folder of the test's own, stopped afterwards."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.procs import wait_for
from tests.services._base import ServiceError, free_port

MASTER = "bfmaster"


@dataclass(frozen=True)
class SentinelSet:
    url: str  # sentinel://127.0.0.1:<sentinel port>/0?master_name=bfmaster
    sentinel: redis.Redis  # the Sentinel itself (SENTINEL ... commands)
    ports: list[int]  # the first master's, then the first replica's

    def master(self) -> redis.Redis:
        """A plain client of the current master (CONFIG SET, unacked records)."""
        return redis.Redis(port=master_port(self.sentinel), socket_timeout=5)


def _server(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen(["redis-server", *args], cwd=tmp, stdout=log, stderr=subprocess.STDOUT)


@contextmanager
def start_sentinel_set(tmp: Path) -> Iterator[SentinelSet]:
    """Start the set and wait until the Sentinel sees the replica in sync; ServiceError when
    redis-server is not installed."""
    if shutil.which("redis-server") is None:
        raise ServiceError("no redis-server on PATH (apt-get install redis-server redis-sentinel)")
    tmp.mkdir(parents=True, exist_ok=True)
    ports = [free_port(), free_port()]
    sport = free_port()
    common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
    procs = [
        _server(tmp, "master", "--port", str(ports[0]), *common),
        _server(
            tmp,
            "replica",
            "--port",
            str(ports[1]),
            "--replicaof",
            "127.0.0.1",
            str(ports[0]),
            *common,
        ),
    ]
    conf = tmp / "sentinel.conf"
    conf.write_text(
        f"port {sport}\nbind 127.0.0.1\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {ports[0]} 1\n"
        f"sentinel down-after-milliseconds {MASTER} 2000\n"
        f"sentinel failover-timeout {MASTER} 10000\n"
    )
    procs.append(_server(tmp, "sentinel", str(conf), "--sentinel"))
    sentinel = redis.Redis(port=sport, decode_responses=True, socket_timeout=5)
    try:
        wait_for(
            lambda: _replicas_ok(sentinel),
            timeout=60,
            message="the Sentinel to see the master and its replica in sync",
        )
        yield SentinelSet(f"sentinel://127.0.0.1:{sport}/0?master_name={MASTER}", sentinel, ports)
    finally:
        sentinel.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


def _replicas_ok(sentinel: redis.Redis) -> bool:
    try:
        replicas = sentinel.execute_command("SENTINEL", "REPLICAS", MASTER)
    except redis.RedisError:
        return False
    return any(
        "slave" in str(r.get("flags")) and r.get("master-link-status") == "ok" for r in replicas
    )


def master_port(sentinel: redis.Redis) -> int:
    """The port of the master the Sentinel names now."""
    _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
    return int(port)
