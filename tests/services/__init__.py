"""Real Redis, PostgreSQL and RabbitMQ for tests: reuse a running server (env var or 127.0.0.1),
or start a throwaway one from binaries the install provides. Also used by fault tests that need a
server of their own to stop, kill and restart (`start_redis_server`, `start_postgres_server`,
`start_rabbitmq_server`)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import redis
import sqlalchemy as sa

from tests.services._base import (
    OWNED,
    STATE_DIR,
    OwnedServer,
    ServiceError,
    force_throwaway,
    free_port,
    reap_orphans,
    source_build_lock,
    terminate_tree,
)
from tests.services.postgres_server import (
    OwnedPostgres,
    postgres_answers,
    postgres_bin_dirs,
    start_postgres_server,
)
from tests.services.rabbitmq_server import (
    OwnedRabbit,
    RabbitServer,
    ensure_rabbitmq,
    start_rabbitmq_server,
)
from tests.services.redis_server import OwnedRedis, redis_answers, redis_binary, start_redis_server

__all__ = [
    "STATE_DIR",
    "OwnedPostgres",
    "OwnedRabbit",
    "OwnedRedis",
    "OwnedServer",
    "PostgresServer",
    "RabbitServer",
    "RedisServer",
    "ServiceError",
    "ensure_postgres",
    "ensure_rabbitmq",
    "ensure_redis",
    "flush_redis",
    "force_throwaway",
    "free_port",
    "postgres_bin_dirs",
    "reap_orphans",
    "redis_binary",
    "start_postgres_server",
    "start_rabbitmq_server",
    "source_build_lock",
    "start_redis_server",
    "stop_all",
    "terminate_tree",
    "xdist_databases",
]


def stop_all() -> None:
    """Stop every server this process started and delete its files (session teardown)."""
    while OWNED:
        server = OWNED.pop()
        with contextlib.suppress(Exception):
            server.close()


# ------------------------------------------------------------------ shared-or-throwaway


def xdist_databases(count: int = 15) -> list[int]:
    """The Redis databases (of 1..``count``) this test process may flush: all of them, or under
    pytest-xdist (``make test`` runs two processes) the worker's own share, so that one worker
    never flushes a database another is using."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers <= 1:
        return list(range(1, count + 1))
    index = int(worker[2:])
    share = [db for db in range(1, count + 1) if (db - 1) % workers == index]
    if len(share) < 2:
        raise ServiceError(f"{workers} xdist workers leave {worker} under two Redis databases")
    return share


@dataclass
class RedisServer:
    url: str  # base URL, database 0
    description: str = ""
    _used: int = 0
    _owned: OwnedRedis | None = None

    def fresh_db_url(self) -> str:
        # This process's share of databases 1..15 rotates; each is flushed before use.
        dbs = xdist_databases()
        db = dbs[self._used % len(dbs)]
        self._used += 1
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
        if redis_answers(url):
            return RedisServer(url=url, description=f"running server {url}")
        if explicit:
            raise ServiceError(f"BEATFLOW_TEST_REDIS_URL={explicit} does not answer PING")
    owned = start_redis_server()
    return RedisServer(
        url=owned.url, description=f"throwaway {owned.url} ({owned.binary})", _owned=owned
    )


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
            if postgres_answers(url):
                return PostgresServer(admin_url=url, description=f"running server {url}")
        if explicit:
            raise ServiceError(f"BEATFLOW_TEST_DATABASE_URL={explicit} does not answer")
    owned = start_postgres_server()
    how = f"throwaway {owned.url} ({owned.bindir}, run as {owned.os_user or 'this user'})"
    return PostgresServer(admin_url=owned.url, description=how, _owned=owned)
