"""The fault kinds of a chaos run. Each is a function of a ``FaultContext`` that injects one
fault, heals it (restart, resume, restore) and returns a line saying what it did. They run one
at a time at seeded random moments, while the workload keeps firing and triggering."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis
import sqlalchemy as sa

from beatflow import connections, keys
from beatflow.chaos.rabbitmq_server import ChaosRabbitMQ
from beatflow.chaos.servers import ChaosPostgres, ChaosRedis
from beatflow.chaos.stack import Child, Stack
from beatflow.chaos.workload import write_module

log = logging.getLogger(__name__)


@dataclass
class FaultContext:
    """What a fault may act on, and where it records what it saw."""

    stack: Stack
    redis_server: ChaosRedis
    postgres: ChaosPostgres | None
    rng: random.Random
    dags_folder: Path
    start: datetime
    lock_timeout: float
    lease_seconds: float
    takeovers: list[float] = field(default_factory=list)
    module_version: int = 1
    stop: threading.Event = field(default_factory=threading.Event)
    rabbitmq: ChaosRabbitMQ | None = None  # the broker node when the broker is RabbitMQ

    def sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def leader(self) -> str | None:
        """The instance name of the beat that holds the lock, or None."""
        try:
            client = connections.redis_client(self.redis_server.url, timeout=2)
            raw = client.get(keys.LEADER)
            client.close()
        except redis.RedisError:
            return None
        if not raw:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            return str(json.loads(text)["instance"])
        return text

    def leader_child(self) -> Child | None:
        name = self.leader()
        return next((b for b in self.stack.beats if b.name == name and b.is_running()), None)

    def busy_worker(self) -> Child:
        running = [w for w in self.stack.workers if w.is_running() and not w.paused]
        return self.rng.choice(running or self.stack.workers)

    def wait_new_leader(self, old: str, since: float, timeout: float = 60.0) -> None:
        """Record how long the lock took to reach another beat (a takeover)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stop.is_set():
            now = self.leader()
            if now is not None and now != old:
                self.takeovers.append(time.monotonic() - since)
                return
            time.sleep(0.05)


Fault = Callable[[FaultContext], str]


def kill_worker(ctx: FaultContext) -> str:
    worker = ctx.busy_worker()
    worker.kill()
    ctx.sleep(ctx.rng.uniform(0.5, 3))
    worker.start()
    return f"SIGKILL worker {worker.name}, restarted"


def term_worker(ctx: FaultContext) -> str:
    worker = ctx.busy_worker()
    worker.stop(grace=30)
    worker.start()
    return f"SIGTERM worker {worker.name} (warm shutdown), restarted"


def kill_beat_leader(ctx: FaultContext) -> str:
    leader = ctx.leader_child()
    if leader is None:
        return "SIGKILL beat leader: no leader at that moment (skipped)"
    since = time.monotonic()
    leader.kill()
    ctx.wait_new_leader(leader.name, since)
    leader.start()
    return f"SIGKILL beat leader {leader.name}, standby took over, restarted"


def pause_beat_leader(ctx: FaultContext) -> str:
    leader = ctx.leader_child()
    if leader is None:
        return "SIGSTOP beat leader: no leader at that moment (skipped)"
    since = time.monotonic()
    leader.signal(signal.SIGSTOP)
    ctx.wait_new_leader(leader.name, since, timeout=3 * ctx.lock_timeout + 30)
    ctx.sleep(max(0.0, 3 * ctx.lock_timeout - (time.monotonic() - since)))
    leader.signal(signal.SIGCONT)
    return f"SIGSTOP beat leader {leader.name} for 3 lock timeouts (zombie leader), SIGCONT"


def pause_worker(ctx: FaultContext) -> str:
    worker = ctx.busy_worker()
    worker.signal(signal.SIGSTOP)
    ctx.sleep(ctx.lease_seconds * 1.5)
    worker.signal(signal.SIGCONT)
    return f"SIGSTOP worker {worker.name} past its lease (zombie worker), SIGCONT"


def restart_redis(ctx: FaultContext) -> str:
    ctx.redis_server.restart()
    return "Redis restarted (append-only file kept)"


def restart_redis_empty(ctx: FaultContext) -> str:
    ctx.redis_server.restart(empty=True)
    return "Redis restarted EMPTY (no persistence: queues, chords, locks lost)"


def refuse_redis_writes(ctx: FaultContext) -> str:
    """Publishes fail (a retry's publish among them): Redis answers OOM for a few seconds."""
    ctx.redis_server.command("CONFIG", "SET", "maxmemory", "1")
    ctx.sleep(ctx.rng.uniform(2, 4))
    ctx.redis_server.command("CONFIG", "SET", "maxmemory", "0")
    return "Redis refused writes for a few seconds (publishes and retries failed)"


def stop_postgres(ctx: FaultContext) -> str:
    if ctx.postgres is None:
        return "stop PostgreSQL: not owned by this run (skipped)"
    ctx.postgres.stop()
    ctx.sleep(ctx.rng.uniform(2, 5))
    ctx.postgres.start()
    return "PostgreSQL stopped for a few seconds"


def stall_leader_db(ctx: FaultContext) -> str:
    """The leader stays alive but its database connections hang (their backends SIGSTOPped)."""
    leader = ctx.leader_child()
    if leader is None or ctx.postgres is None or leader.pid is None:
        return "stall leader DB: no leader or no owned PostgreSQL (skipped)"
    ports = _local_ports(leader.pid, ctx.postgres.port)
    backends = _backend_pids(ctx.postgres, ports)
    for pid in backends:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    ctx.sleep(3 * ctx.lock_timeout + 2)
    for pid in backends:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return f"stalled {len(backends)} DB connection(s) of beat leader {leader.name}"


def deploy_skew(ctx: FaultContext) -> str:
    """Roll one worker onto a changed DAG module while runs of the old one are in flight."""
    ctx.module_version += 1
    write_module(ctx.dags_folder, ctx.start, version=ctx.module_version)
    worker = ctx.busy_worker()
    worker.stop(grace=30)
    worker.start()
    return f"rolled worker {worker.name} onto DAG module version {ctx.module_version}"


FAULTS: dict[str, Fault] = {
    "kill_worker": kill_worker,
    "term_worker": term_worker,
    "kill_beat_leader": kill_beat_leader,
    "pause_beat_leader": pause_beat_leader,
    "pause_worker": pause_worker,
    "restart_redis": restart_redis,
    "restart_redis_empty": restart_redis_empty,
    "refuse_redis_writes": refuse_redis_writes,
    "stop_postgres": stop_postgres,
    "stall_leader_db": stall_leader_db,
    "deploy_skew": deploy_skew,
}


def _local_ports(pid: int, remote_port: int) -> set[int]:
    """Local TCP ports of ``pid``'s sockets (and its children's) connected to ``remote_port``."""
    inodes: set[str] = set()
    pids = [pid, *_children(pid)]
    for p in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{p}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{p}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                local, remote, inode = cols[1], cols[2], cols[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
    return out


def _backend_pids(postgres: ChaosPostgres, client_ports: set[int]) -> list[int]:
    if not client_ports:
        return []
    engine = sa.create_engine(postgres.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT pid, client_port FROM pg_stat_activity WHERE client_port IS NOT NULL"
                )
            ).all()
    finally:
        engine.dispose()
    return [int(pid) for pid, port in rows if int(port) in client_ports]
