"""The image for real: the migration, a worker, two beats, Flower, the web UI and the exporter run
as Podman
containers (read-only root, uid 10001, the host's network) against the test Redis and
PostgreSQL; a DAG runs to success; each container passes the image's HEALTHCHECK; Flower and the
web API want credentials; /metrics serves; and killing the beat leader's container lets the
standby fire."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from celery import Celery

from beatflow.scheduler.status import read_status
from beatflow.settings import Settings
from beatflow.store import Store
from tests import procs, services
from tests.container import podman

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

FLOWER_AUTH = ("ops", f"pw-{uuid.uuid4().hex[:8]}")
WEB_PASSWORD = f"web-{uuid.uuid4().hex}"


@dataclass
class Deployed:
    stack: podman.Stack
    redis_url: str
    settings: Settings
    worker: podman.Container
    beats: dict[str, podman.Container]
    flower: podman.Container
    web: podman.Container
    exporter: podman.Container
    flower_port: int
    web_port: int
    metrics_port: int
    dags: Path
    ping_seconds: float

    def long_running(self) -> list[podman.Container]:
        return [self.worker, *self.beats.values(), self.flower, self.web, self.exporter]


@pytest.fixture(scope="module")
def deployed(
    image: str,
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_ctr_{uuid.uuid4().hex[:8]}"
    database_url = postgres_server.create_database(db_name)
    # The containers read the dags folder as uid 10001: world-readable, mounted read-only.
    dags = podman.dags_folder(tmp_path_factory.mktemp("ctr"))
    flower_port, metrics_port, web_port = (services.free_port() for _ in range(3))
    env = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": database_url,
        "BEATFLOW_QUEUES": "default",
        "BEATFLOW_FLOWER_PORT": str(flower_port),
        "BEATFLOW_METRICS_PORT": str(metrics_port),
        "BEATFLOW_WEB_PORT": str(web_port),
    }
    settings = Settings.from_env({**env, "BEATFLOW_DAGS_FOLDER": str(dags)})
    stack = podman.Stack(image, env)
    volume = [f"{dags}:/app/dags:ro"]
    try:
        migrated = stack.once("migrate", ["beatflow", "db", "upgrade"], volumes=volume)
        assert migrated.returncode == 0, migrated.stderr

        app = Celery("ctr-probe", broker=redis_url, set_as_current=False)
        started = time.monotonic()
        worker = stack.start(
            "bf-worker",
            ["celery", "-A", "beatflow", "worker", "-l", "info", "-E", "-Q", "default", "-c", "2"],
            volumes=volume,
        )

        def pinged() -> bool:
            if not worker.is_running():
                raise AssertionError(f"worker exited:\n{worker.logs()}")
            replies = app.control.ping(destination=["celery@bf-worker"], timeout=0.5)
            return bool(replies)

        procs.wait_for(pinged, timeout=180, interval=0.2, message="the worker to answer ping")
        ping_seconds = time.monotonic() - started
        app.close()
        print(f"\n`podman run` to a worker answering ping: {ping_seconds:.1f}s")

        beats = {
            name: stack.start(
                name,
                [
                    "celery",
                    "-A",
                    "beatflow",
                    "beat",
                    "-l",
                    "info",
                    "--schedule",
                    "/tmp/celerybeat-schedule",
                ],
                env={"BEATFLOW_INSTANCE": name},
                volumes=volume,
            )  # fmt: skip
            for name in ("beat-1", "beat-2")
        }
        flower = stack.start(
            "flower",
            ["celery", "-A", "beatflow", "flower", f"--port={flower_port}"],
            env={
                "BEATFLOW_FLOWER_USER": FLOWER_AUTH[0],
                "BEATFLOW_FLOWER_PASSWORD": FLOWER_AUTH[1],
            },
            volumes=volume,
        )
        web = stack.start(
            "web",
            ["beatflow", "web", "--port", str(web_port)],
            env={"BEATFLOW_WEB_PASSWORD": WEB_PASSWORD, "BEATFLOW_WEB_SECRET_KEY": "k" * 40},
            volumes=volume,
        )
        exporter = stack.start("exporter", ["beatflow", "exporter"], volumes=volume)
        yield Deployed(
            stack,
            redis_url,
            settings,
            worker,
            beats,
            flower,
            web,
            exporter,
            flower_port,
            web_port,
            metrics_port,
            dags,
            ping_seconds,
        )
    finally:
        stack.remove()
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)


def test_each_container_passes_the_image_healthcheck(deployed: Deployed) -> None:
    for container in deployed.long_running():
        deployed.stack.wait_healthy(container)


def test_every_container_runs_as_uid_10001_on_a_read_only_root(deployed: Deployed) -> None:
    for container in deployed.long_running():
        assert container.exec("id", "-u").stdout.strip() == "10001"
        assert container.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
        denied = container.exec("touch", "/app/dags/x")
        assert denied.returncode != 0
        assert container.exec("touch", "/tmp/writable").returncode == 0


def test_flower_answers_401_without_credentials(deployed: Deployed) -> None:
    base = f"http://127.0.0.1:{deployed.flower_port}"
    procs.wait_for(
        lambda: podman.http_get(f"{base}/healthcheck")[0] == 200, timeout=90, interval=0.5
    )
    assert podman.http_get(f"{base}/api/workers")[0] == 401
    assert podman.http_get(f"{base}/api/workers", FLOWER_AUTH)[0] == 200
    # The password reached Flower through the environment, never its command line.
    argv = deployed.flower.inspect("{{.Config.Cmd}}")
    assert FLOWER_AUTH[1] not in argv


def test_the_web_ui_answers_healthz_and_refuses_its_api_without_credentials(
    deployed: Deployed,
) -> None:
    base = f"http://127.0.0.1:{deployed.web_port}"
    procs.wait_for(lambda: podman.http_get(f"{base}/healthz")[0] == 200, timeout=90, interval=0.5)
    assert podman.http_get(f"{base}/healthz")[1].strip() == b'{"status":"ok"}'
    assert podman.http_get(f"{base}/api/v1/dags")[0] == 401
    assert WEB_PASSWORD not in deployed.web.inspect("{{.Config.Cmd}}")


def test_the_exporter_serves_metrics(deployed: Deployed) -> None:
    url = f"http://127.0.0.1:{deployed.metrics_port}/metrics"
    procs.wait_for(lambda: podman.http_get(url)[0] == 200, timeout=90, interval=0.5)
    status, body = podman.http_get(url)
    assert status == 200
    assert b"celery_" in body and b"beatflow_" in body


def test_a_dag_triggered_from_a_container_runs_to_success(deployed: Deployed) -> None:
    done = deployed.stack.once(
        "cli",
        ["beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "180"],
        volumes=[f"{deployed.dags}:/app/dags:ro"],
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{deployed.worker.logs()}"
    assert "success" in done.stdout


def test_killing_the_beat_leaders_container_lets_the_standby_fire(deployed: Deployed) -> None:
    client = redis.Redis.from_url(deployed.redis_url, decode_responses=True)
    store = Store.from_settings(deployed.settings)
    try:

        def leader() -> str | None:
            status = read_status(client)
            return None if status.leader is None else str(status.leader["instance"])

        first = str(procs.wait_for(leader, timeout=120, interval=0.5, message="a beat leader"))
        assert first in deployed.beats
        procs.wait_for(
            lambda: store.list_dag_runs("ctr_ticks", limit=5),
            timeout=120,
            interval=0.5,
            message="the leader to fire ctr_ticks",
        )
        deployed.beats[first].kill()
        killed_at = datetime.now(UTC)
        (standby,) = set(deployed.beats) - {first}
        procs.wait_for(
            lambda: leader() == standby, timeout=120, interval=0.5, message=f"{standby} to lead"
        )

        def fired_after_kill() -> bool:
            runs = store.list_dag_runs("ctr_ticks", limit=20)
            dates = [r.logical_date for r in runs if r.logical_date is not None]
            return any((d if d.tzinfo else d.replace(tzinfo=UTC)) > killed_at for d in dates)

        procs.wait_for(fired_after_kill, timeout=120, interval=0.5, message="the standby to fire")
    finally:
        store.close()
        client.close()
