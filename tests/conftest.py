"""Fixtures for real services: Redis, PostgreSQL, SQLite. Integration tests never skip in CI
(CI=true): a service that cannot be reached there fails the run."""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from tests import services

T = TypeVar("T")


def _unavailable(what: str, exc: BaseException) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is required in CI and could not be reached or started: {exc}")
    pytest.skip(f"{what} not available: {exc}")


def _started(what: str, start: Callable[[], T]) -> T:
    """``start()``, or the test skipped (failed in CI) when ``what`` cannot be had."""
    try:
        return start()
    except services.ServiceError as exc:
        _unavailable(what, exc)
        raise


# what the fixtures used, the xdist workers' too (each may start its own throwaway server), for
# the summary: service -> its descriptions in order
_USED: dict[str, dict[str, None]] = defaultdict(dict)


# The files that take longest, longest first. make test runs each file whole in one xdist process,
# in the order of the collection (--no-loadscope-reorder): these start at once, beside the many
# short files, instead of last, where xdist's own order (most tests first) put the one-test files
# (test_chaos_run.py was 182nd of 212) and one process ran them alone after the other had ended.
# Seconds: the full run's --durations, or -n 0 on the 2-core machine.
LONGEST_FIRST = (
    "tests/container/test_compose_stack.py",  # the image (35-50 s), the stack, its checks: 116 s
    "tests/chaos/test_chaos_run.py",  # 150 s
    "tests/container/test_image.py",  # 100 s, with the image
    "tests/integration/test_plain_install.py",  # a venv and pip install from the source tree
    "tests/integration/cli/test_json_and_errors.py",  # ~50 `beatflow` processes: 96 s
    "tests/chaos/test_chaos_run_rabbitmq.py",  # 82 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist process, order the files: LONGEST_FIRST, then the rest with the most tests
    first (xdist's own order); each file's tests keep their order."""
    if not hasattr(config, "workerinput"):
        return
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item.nodeid.split("::", 1)[0]] += 1

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        first = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, -counts[path]

    items.sort(key=rank)  # stable: a file's tests stay together and in order


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)  # an xdist worker: tell the controller
    if output is not None:
        output["services_used"] = {name: list(hows) for name, hows in _USED.items()}


def pytest_testnodedown(node: object, error: object) -> None:
    """xdist's controller: a worker ended; keep what its fixtures used for the summary."""
    for name, hows in getattr(node, "workeroutput", {}).get("services_used", {}).items():
        _USED[name].update(dict.fromkeys(hows))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, hows in _USED.items():
        terminalreporter.write_line(f"{name}: {'; '.join(hows)}")


@pytest.fixture(scope="session", autouse=True)
def _throwaway_services() -> Iterator[None]:
    """Reap servers a killed earlier run left behind; stop every server this run started."""
    services.reap_orphans()
    yield
    services.stop_all()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[services.RedisServer]:
    """A reachable Redis: BEATFLOW_TEST_REDIS_URL, else 127.0.0.1:6379, else a throwaway one."""
    server = _started("Redis", services.ensure_redis)
    _USED["Redis"][server.description] = None
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[services.PostgresServer]:
    """A reachable PostgreSQL: BEATFLOW_TEST_DATABASE_URL, else 127.0.0.1:5432, else throwaway."""
    server = _started("PostgreSQL", services.ensure_postgres)
    _USED["PostgreSQL"][server.description] = None
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[services.RabbitServer]:
    """A reachable RabbitMQ: 127.0.0.1:5672 (guest/guest) under a vhost of this session's own,
    else (or with BEATFLOW_TEST_FORCE_THROWAWAY) a throwaway node on free ports."""
    server = _started(
        "RabbitMQ", lambda: services.ensure_rabbitmq(throwaway=services.force_throwaway())
    )
    _USED["RabbitMQ"][server.description] = None
    yield server
    server.stop()


@pytest.fixture
def own_rabbitmq() -> Iterator[services.OwnedRabbit]:
    """A RabbitMQ node of the test's own, to stop, kill and start again; removed afterwards."""
    server = _started("a throwaway RabbitMQ", services.start_rabbitmq_server)
    yield server
    server.close()


BROKERS = ("redis", "rabbitmq")


def broker_env(request: pytest.FixtureRequest, broker: str, redis_url: str) -> dict[str, str]:
    """The BEATFLOW_* variables of a cluster on ``broker`` whose Redis is ``redis_url``."""
    if broker == "redis":
        return {"BEATFLOW_BROKER_URL": redis_url}
    server: services.RabbitServer = request.getfixturevalue("rabbitmq_server")
    return {"BEATFLOW_BROKER_URL": server.url, "BEATFLOW_REDIS_URL": redis_url}


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> str:
    """Runs the test once with Redis as the broker and once with RabbitMQ."""
    return str(request.param)


@pytest.fixture
def redis_url(redis_server: services.RedisServer) -> Iterator[str]:
    """A Redis URL on a database of its own, flushed before and after the test."""
    url = redis_server.fresh_db_url()
    yield url
    services.flush_redis(url)


@pytest.fixture
def own_redis() -> Iterator[services.OwnedRedis]:
    """A Redis server of the test's own, to stop, kill and restart; removed afterwards."""
    server = _started("a throwaway Redis", services.start_redis_server)
    yield server
    server.close()


@pytest.fixture
def own_postgres() -> Iterator[services.OwnedPostgres]:
    """A PostgreSQL cluster of the test's own, to stop and restart; removed afterwards."""
    server = _started("a throwaway PostgreSQL", services.start_postgres_server)
    yield server
    server.close()


@pytest.fixture
def make_postgres_db(postgres_server: services.PostgresServer) -> Iterator[Callable[[], str]]:
    """Factory: a new empty PostgreSQL database per call (SQLAlchemy URL), dropped afterwards."""
    created: list[str] = []

    def make() -> str:
        name = f"bf_{uuid.uuid4().hex[:12]}"
        created.append(name)
        return postgres_server.create_database(name)

    yield make
    for name in created:
        postgres_server.drop_database(name)


@pytest.fixture
def postgres_url(make_postgres_db: Callable[[], str]) -> str:
    return make_postgres_db()


@pytest.fixture
def sqlite_url(tmp_path: os.PathLike[str]) -> str:
    return f"sqlite:///{os.path.join(tmp_path, 'beatflow.db')}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Runs the test once on SQLite and once on PostgreSQL (the store contract)."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))
