"""docker-compose.yml in containers: podman-compose brings up its beatflow services (migration,
worker, two beats, Flower, web, exporter) from the built image with deploy/compose/host-services.yml
pointing them at the test Redis and PostgreSQL on this host (their own images need a registry).
The same checks as the image test: health checks, uid 10001 on a read-only root, Flower's 401,
/metrics, the web UI's open /healthz and closed API, a DAG to success, and a beat failover."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import yaml

from beatflow.scheduler.status import read_status
from beatflow.settings import Settings
from beatflow.store import Store
from tests import procs, services
from tests.container import podman

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SERVICES = ("worker", "beat-1", "beat-2", "flower", "web", "exporter")
FLOWER_AUTH = ("ops", f"flower-{uuid.uuid4().hex[:8]}")
WEB_PASSWORD = f"web-{uuid.uuid4().hex}"


@dataclass
class Composed(podman.Compose):
    settings: Settings
    redis_url: str
    ports: dict[str, int]


@pytest.fixture(scope="module")
def composed(
    image: str,
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Composed]:
    if not Path(podman.podman_compose()).exists() and shutil.which("podman-compose") is None:
        pytest.fail(
            "podman-compose is missing: it comes with the test extra (pip install -e .[test])"
        )
    tmp = tmp_path_factory.mktemp("compose")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_cmp_{uuid.uuid4().hex[:8]}"
    database_url = postgres_server.create_database(db_name)
    dags = podman.dags_folder(tmp)
    # The test's own dags folder in every beatflow service.
    mount = {"volumes": [f"{dags}:/app/dags:ro"]}
    test_override = tmp / "test-override.yml"
    test_override.write_text(
        yaml.safe_dump({"services": {name: mount for name in ("migrate", *SERVICES)}})
    )
    ports = {name: services.free_port() for name in ("flower", "web", "metrics")}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
        "BEATFLOW_IMAGE": image,
        "BEATFLOW_QUEUES": "default",
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": database_url,
        # docker-compose.yml requires these; the host's services do not use them.
        "REDIS_PASSWORD": "unused",
        "POSTGRES_PASSWORD": "unused",
        "GRAFANA_ADMIN_PASSWORD": "unused",
        "BEATFLOW_FLOWER_USER": FLOWER_AUTH[0],
        "BEATFLOW_FLOWER_PASSWORD": FLOWER_AUTH[1],
        "BEATFLOW_WEB_PASSWORD": WEB_PASSWORD,
        "BEATFLOW_WEB_SECRET_KEY": uuid.uuid4().hex * 2,
        "FLOWER_PORT": str(ports["flower"]),
        "WEB_PORT": str(ports["web"]),
        "METRICS_PORT": str(ports["metrics"]),
    }
    files = [
        str(procs.ROOT / "docker-compose.yml"),
        str(procs.ROOT / "deploy" / "compose" / "host-services.yml"),
        str(test_override),
    ]
    settings = Settings.from_env(
        {"BEATFLOW_BROKER_URL": redis_url, "BEATFLOW_DATABASE_URL": database_url}
    )
    stack = Composed(f"bfc{uuid.uuid4().hex[:6]}", env, files, settings, redis_url, ports)
    try:
        migrated = stack.compose("run", "--rm", "migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        up = stack.compose("up", "-d", "--no-deps", *SERVICES)
        assert up.returncode == 0, up.stdout + up.stderr
        yield stack
    finally:
        stack.down()
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)


def test_every_compose_service_passes_its_health_check(composed: Composed) -> None:
    stack = podman.Stack("", {})
    for service in SERVICES:
        stack.wait_healthy(composed.container(service), timeout=180)


def test_compose_services_run_as_uid_10001_on_a_read_only_root(composed: Composed) -> None:
    for service in SERVICES:
        container = composed.container(service)
        assert container.exec("id", "-u").stdout.strip() == "10001", service
        assert container.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true", service
        assert container.exec("touch", "/app/x").returncode != 0, service


def test_compose_flower_wants_credentials_that_are_not_on_its_command_line(
    composed: Composed,
) -> None:
    base = f"http://127.0.0.1:{composed.ports['flower']}"
    procs.wait_for(lambda: podman.http_get(f"{base}/healthcheck")[0] == 200, timeout=120)
    assert podman.http_get(f"{base}/api/workers")[0] == 401
    assert podman.http_get(f"{base}/api/workers", FLOWER_AUTH)[0] == 200
    argv = composed.container("flower").exec("cat", "/proc/1/cmdline").stdout
    assert FLOWER_AUTH[1] not in argv


def test_compose_web_answers_healthz_openly_and_nothing_else(composed: Composed) -> None:
    base = f"http://127.0.0.1:{composed.ports['web']}"
    procs.wait_for(lambda: podman.http_get(f"{base}/healthz")[0] == 200, timeout=120)
    assert podman.http_get(f"{base}/healthz")[1].strip() == b'{"status":"ok"}'
    assert podman.http_get(f"{base}/api/v1/dags")[0] == 401
    argv = composed.container("web").exec("cat", "/proc/1/cmdline").stdout
    assert WEB_PASSWORD not in argv


def test_compose_exporter_serves_metrics(composed: Composed) -> None:
    url = f"http://127.0.0.1:{composed.ports['metrics']}/metrics"
    procs.wait_for(lambda: podman.http_get(url)[0] == 200, timeout=120)
    assert b"celery_" in podman.http_get(url)[1]


def test_a_dag_triggered_through_compose_runs_to_success(composed: Composed) -> None:
    done = composed.compose(
        "run", "--rm", "--no-deps", "worker",
        "beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "180",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "success" in done.stdout


def test_killing_the_compose_beat_leader_lets_the_standby_fire(composed: Composed) -> None:
    client = redis.Redis.from_url(composed.redis_url, decode_responses=True)
    store = Store.from_settings(composed.settings)
    try:

        def leader() -> str | None:
            status = read_status(client)
            return None if status.leader is None else str(status.leader["instance"])

        first = str(procs.wait_for(leader, timeout=120, interval=0.5, message="a beat leader"))
        assert first in ("beat-1", "beat-2")
        composed.container(first).kill()
        killed_at = datetime.now(UTC)
        standby = "beat-2" if first == "beat-1" else "beat-1"
        procs.wait_for(lambda: leader() == standby, timeout=120, interval=0.5)

        def fired_after_kill() -> bool:
            dates = [r.logical_date for r in store.list_dag_runs("ctr_ticks", limit=20)]
            return any((d if d.tzinfo else d.replace(tzinfo=UTC)) > killed_at for d in dates if d)

        procs.wait_for(fired_after_kill, timeout=120, interval=0.5, message="the standby to fire")
    finally:
        store.close()
        client.close()
