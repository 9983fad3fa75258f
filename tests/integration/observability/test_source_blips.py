"""Redis and PostgreSQL go away under a running exporter: it keeps serving, says which source is
down, and picks each source up again when it returns."""

from __future__ import annotations

import json
import urllib.request

import pytest

from beatflow.store import Store
from tests import services
from tests.integration.observability.conftest import (
    exporter_proc,
    http_json,
    scrape,
    wait_exporter_ready,
)
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_the_exporter_survives_redis_and_database_outages_and_reports_them(
    own_redis: services.OwnedRedis,
    own_postgres: services.OwnedPostgres,
    tmp_path: object,
) -> None:
    Store(own_postgres.url).upgrade()
    port = services.free_port()
    env = {
        "BEATFLOW_BROKER_URL": own_redis.url,
        "BEATFLOW_DATABASE_URL": own_postgres.url,
        "BEATFLOW_DAGS_FOLDER": "tests/dags",
        "BEATFLOW_METRICS_PORT": str(port),
    }
    exporter = exporter_proc(tmp_path, env).start()  # type: ignore[arg-type]
    base = f"http://127.0.0.1:{port}"

    def up(source: str) -> float:
        return scrape(base + "/metrics").get_value("beatflow_exporter_source_up", source=source)

    def wait_up(source: str, value: float) -> None:
        wait_for(
            lambda: up(source) == value,
            timeout=30,
            interval=0.1,
            message=f"source {source} up={value}",
        )

    try:
        wait_exporter_ready(exporter, base)
        for source in ("redis", "events", "database"):
            wait_up(source, 1)

        own_redis.kill()
        wait_up("redis", 0)
        wait_up("events", 0)
        assert http_json(base + "/healthz")[0] == 200  # down sources are metrics, not a restart
        own_redis.start()
        wait_up("redis", 1)
        wait_up("events", 1)

        own_postgres.stop()
        wait_up("database", 0)
        assert up("redis") == 1
        own_postgres.start()
        wait_up("database", 1)

        assert exporter.popen is not None and exporter.popen.poll() is None
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            assert response.status == 200
    finally:
        exporter.stop()
    log = exporter.log()
    assert "Traceback" not in log
    records = [json.loads(line) for line in log.splitlines() if line.strip()]  # JSON lines only
    events = {r.get("event") for r in records}
    assert {"exporter_started", "source_down", "source_up"} <= events
