"""docker-compose.yml's own stack in containers, Redis and PostgreSQL included: podman-compose on
Podman's bridge network, with deploy/compose/debian-services.yml supplying Redis and PostgreSQL
images built from Debian's packages (Docker Hub's cannot be pulled here). Prometheus and Grafana
are left out (their images need a registry). The stack is brought up once for the module; its
tests make the image test's checks, reached the way a user of the stack reaches them: published
ports, `podman exec`, `podman-compose run`: health checks, uid 10001 on a read-only root,
Flower's and the web UI's logins (their secrets not on a command line), /metrics, a DAG to
success, and a beat failover. deploy/compose/host-services.yml (beatflow's services against
the host's Redis and PostgreSQL) is resolved by tests/deploy/test_compose.py."""

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
WEB_PASSWORD = f"web-{uuid.uuid4().hex}"
# the port each service listens on in its container, published on the host's loopback (in
# place of docker-compose.yml's published ports; the exporter's is only exposed there)
PUBLISHED = {"flower": 5555, "web": 8080, "exporter": 9808}


@dataclass
class Stack(podman.Compose):
    ports: dict[str, int]  # service -> its published port on 127.0.0.1

    def url(self, service: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}{path}"

    def cli_json(self, *argv: str) -> object:
        done = self.container("worker").exec("beatflow", *argv, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


def _override(dags: Path, ports: dict[str, int]) -> str:
    lines = ["services:"]
    for name in ("migrate", *APP):
        lines += [f"  {name}:", "    volumes:", f"      - {dags}:/app/dags:ro"]
        if name in ports:
            published = f'["127.0.0.1:{ports[name]}:{PUBLISHED[name]}"]'
            tag = "" if name == "exporter" else "!override "  # podman-compose needs one to replace
            lines.append(f"    ports: {tag}{published}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    dags = podman.dags_folder(tmp)
    ports = {name: services.free_port() for name in PUBLISHED}
    override = tmp / "ports-and-dags.yml"
    override.write_text(_override(dags, ports))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
        "BEATFLOW_IMAGE": image,
        "REDIS_PASSWORD": uuid.uuid4().hex,
        "POSTGRES_PASSWORD": uuid.uuid4().hex,
        "GRAFANA_ADMIN_PASSWORD": "unused",
        "BEATFLOW_FLOWER_USER": FLOWER_AUTH[0],
        "BEATFLOW_FLOWER_PASSWORD": FLOWER_AUTH[1],
        "BEATFLOW_WEB_PASSWORD": WEB_PASSWORD,
        "BEATFLOW_WEB_SECRET_KEY": uuid.uuid4().hex * 2,
    }
    files = [
        str(procs.ROOT / "docker-compose.yml"),
        str(procs.ROOT / "deploy" / "compose" / "debian-services.yml"),
        str(override),
    ]
    up = Stack(f"bfs{uuid.uuid4().hex[:6]}", env, files, ports)
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
        assert container.exec("touch", "/app/x").returncode != 0, service


def test_flower_wants_credentials_that_are_not_on_its_command_line(stack: Stack) -> None:
    procs.wait_for(lambda: podman.http_get(stack.url("flower", "/healthcheck"))[0] == 200, 120)
    assert podman.http_get(stack.url("flower", "/api/workers"))[0] == 401
    assert podman.http_get(stack.url("flower", "/api/workers"), FLOWER_AUTH)[0] == 200
    argv = stack.container("flower").exec("cat", "/proc/1/cmdline").stdout
    assert FLOWER_AUTH[1] not in argv


def test_the_web_ui_answers_healthz_openly_and_nothing_else(stack: Stack) -> None:
    procs.wait_for(lambda: podman.http_get(stack.url("web", "/healthz"))[0] == 200, timeout=120)
    assert podman.http_get(stack.url("web", "/healthz"))[1].strip() == b'{"status":"ok"}'
    assert podman.http_get(stack.url("web", "/api/v1/dags"))[0] == 401
    argv = stack.container("web").exec("cat", "/proc/1/cmdline").stdout
    assert WEB_PASSWORD not in argv


def test_the_exporter_serves_metrics_inside_the_stack_and_on_its_port(stack: Stack) -> None:
    done = stack.container("exporter").exec(
        "python3", "-c",
        "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9808/metrics').read().decode())",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "celery_" in done.stdout and "beatflow_" in done.stdout
    url = stack.url("exporter", "/metrics")
    procs.wait_for(lambda: podman.http_get(url)[0] == 200, timeout=120)
    assert b"celery_" in podman.http_get(url)[1]


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
    assert first in ("beat-1", "beat-2")
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
