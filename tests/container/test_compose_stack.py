"""docker-compose.yml's own stack in containers, Redis and PostgreSQL included: podman-compose on
Podman's bridge network, with deploy/compose/debian-services.yml supplying Redis and PostgreSQL
images built from Debian's packages (Docker Hub's cannot be pulled here). Prometheus and Grafana
are left out (their images need a registry). The same checks as the image test, reached the way
a user of the stack reaches them: published ports, `podman exec`, `podman-compose run`."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests import procs, services
from tests.container import podman

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BACKING = ("redis", "postgres")
APP = ("worker", "beat-1", "beat-2", "flower", "web", "exporter")
FLOWER_AUTH = ("ops", f"flower-{uuid.uuid4().hex[:8]}")


@dataclass
class Stack(podman.Compose):
    flower_port: int
    web_port: int

    def cli_json(self, *argv: str) -> object:
        done = self.container("worker").exec("beatflow", *argv, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


def _override(dags: Path, flower_port: int, web_port: int) -> str:
    lines = ["services:"]
    for name in ("migrate", *APP):
        lines += [f"  {name}:", "    volumes:", f"      - {dags}:/app/dags:ro"]
        if name == "flower":
            lines.append(f'    ports: !override ["127.0.0.1:{flower_port}:5555"]')
        if name == "web":
            lines.append(f'    ports: !override ["127.0.0.1:{web_port}:8080"]')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    dags = podman.dags_folder(tmp)
    flower_port, web_port = services.free_port(), services.free_port()
    override = tmp / "ports-and-dags.yml"
    override.write_text(_override(dags, flower_port, web_port))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
        "BEATFLOW_IMAGE": image,
        "REDIS_PASSWORD": uuid.uuid4().hex,
        "POSTGRES_PASSWORD": uuid.uuid4().hex,
        "GRAFANA_ADMIN_PASSWORD": "unused",
        "BEATFLOW_FLOWER_USER": FLOWER_AUTH[0],
        "BEATFLOW_FLOWER_PASSWORD": FLOWER_AUTH[1],
        "BEATFLOW_WEB_PASSWORD": uuid.uuid4().hex,
        "BEATFLOW_WEB_SECRET_KEY": uuid.uuid4().hex * 2,
    }
    files = [
        str(procs.ROOT / "docker-compose.yml"),
        str(procs.ROOT / "deploy" / "compose" / "debian-services.yml"),
        str(override),
    ]
    up = Stack(f"bfs{uuid.uuid4().hex[:6]}", env, files, flower_port, web_port)
    plain = podman.Stack("", {})
    try:
        started = up.compose("up", "-d", *BACKING)
        assert started.returncode == 0, started.stdout + started.stderr
        for name in BACKING:
            plain.wait_healthy(up.container(name), timeout=120)
        migrated = up.compose("run", "--rm", "migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        started = up.compose("up", "-d", "--no-deps", *APP)
        assert started.returncode == 0, started.stdout + started.stderr
        yield up
    finally:
        up.down("-v")


def test_the_whole_stack_passes_its_health_checks(stack: Stack) -> None:
    plain = podman.Stack("", {})
    for service in (*BACKING, *APP):
        plain.wait_healthy(stack.container(service), timeout=180)


def test_beatflow_services_run_as_uid_10001_on_a_read_only_root(stack: Stack) -> None:
    for service in APP:
        container = stack.container(service)
        assert container.exec("id", "-u").stdout.strip() == "10001", service
        assert container.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true", service


def test_flower_and_web_answer_on_their_published_ports_behind_their_logins(
    stack: Stack,
) -> None:
    flower = f"http://127.0.0.1:{stack.flower_port}"
    procs.wait_for(lambda: podman.http_get(f"{flower}/healthcheck")[0] == 200, timeout=120)
    assert podman.http_get(f"{flower}/api/workers")[0] == 401
    assert podman.http_get(f"{flower}/api/workers", FLOWER_AUTH)[0] == 200
    web = f"http://127.0.0.1:{stack.web_port}"
    procs.wait_for(lambda: podman.http_get(f"{web}/healthz")[0] == 200, timeout=120)
    assert podman.http_get(f"{web}/api/v1/dags")[0] == 401


def test_the_exporter_serves_metrics_inside_the_stack(stack: Stack) -> None:
    done = stack.container("exporter").exec(
        "python3", "-c",
        "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9808/metrics').read().decode())",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "celery_" in done.stdout and "beatflow_" in done.stdout


def test_a_dag_runs_to_success_through_the_stack(stack: Stack) -> None:
    done = stack.compose(
        "run", "--rm", "--no-deps", "worker",
        "beatflow", "dags", "trigger", "example_fan_out", "--wait", "--timeout", "180",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "success" in done.stdout


def test_killing_the_beat_leader_lets_the_standby_fire(stack: Stack) -> None:
    def leader() -> str | None:
        status = stack.cli_json("beat", "status")
        assert isinstance(status, dict)
        return None if status["leader"] is None else str(status["leader"]["instance"])

    first = str(procs.wait_for(leader, timeout=120, interval=1.0, message="a beat leader"))
    stack.container(first).kill()
    killed_at = datetime.now(UTC)
    standby = "beat-2" if first == "beat-1" else "beat-1"
    procs.wait_for(lambda: leader() == standby, timeout=120, interval=1.0)

    def fired_after_kill() -> bool:
        runs = stack.cli_json("runs", "list", "ctr_ticks")
        assert isinstance(runs, list)
        dates = [datetime.fromisoformat(r["logical_date"]) for r in runs if r.get("logical_date")]
        return any(d > killed_at for d in dates)

    procs.wait_for(fired_after_kill, timeout=120, interval=1.0, message="the standby to fire")
