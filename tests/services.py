"""Real Redis and PostgreSQL for tests: reuse a running server (env var or 127.0.0.1), or start a
throwaway one from binaries the install provides. Also used by fault tests that need a server of
their own to stop and restart."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import redis
import sqlalchemy as sa


class ServiceError(Exception):
    """Raised when a service cannot be reached or started."""


@dataclass
class RedisServer:
    url: str  # base URL, database 0
    _next_db: int = 1
    _owned: object | None = None

    def fresh_db_url(self) -> str:
        # Databases 1..15 rotate; each is flushed before use.
        db = self._next_db
        self._next_db = 1 + (self._next_db % 15)
        parts = urlsplit(self.url)
        url = urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", ""))
        flush_redis(url)
        return url

    def stop(self) -> None:
        stop = getattr(self._owned, "stop", None)
        if stop:
            stop()


@dataclass
class PostgresServer:
    admin_url: str  # SQLAlchemy URL to a database we may CREATE DATABASE from
    _owned: object | None = None
    _engine: sa.Engine | None = field(default=None, repr=False)

    def _admin(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        return self._engine

    def create_database(self, name: str) -> str:
        with self._admin().connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        return str(sa.make_url(self.admin_url).set(database=name).render_as_string(hide_password=False))

    def drop_database(self, name: str) -> None:
        with self._admin().connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        stop = getattr(self._owned, "stop", None)
        if stop:
            stop()


def flush_redis(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def _redis_up(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def ensure_redis() -> RedisServer:
    url = os.environ.get("BEATFLOW_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    if _redis_up(url):
        return RedisServer(url=url)
    raise ServiceError(f"no Redis at {url}")


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


def ensure_postgres() -> PostgresServer:
    candidates = [os.environ["BEATFLOW_TEST_DATABASE_URL"]] if os.environ.get(
        "BEATFLOW_TEST_DATABASE_URL"
    ) else [
        "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        "postgresql+psycopg://root@127.0.0.1:5432/test",
    ]
    for url in candidates:
        if _pg_up(url):
            return PostgresServer(admin_url=url)
    raise ServiceError(f"no PostgreSQL at {', '.join(candidates)}")
