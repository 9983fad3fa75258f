"""docker-compose.rabbitmq.yml, the override that puts the queues on RabbitMQ, validates offline
with docker-compose.yml (compose-spec schema and Debian's docker-compose, as test_compose.py does
for the base file): a hardened, health-checked rabbitmq service every beatflow service waits
for, the broker URL on it, Redis kept for the beat, and no start without RABBITMQ_PASSWORD."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import ROOT
from tests.deploy.test_compose import (
    BEATFLOW_SERVICES,
    COMPOSE,
    SECRETS,
    compose_config,
    compose_spec_check,
    docker_compose,
)

OVERRIDE = ROOT / "docker-compose.rabbitmq.yml"
RABBIT_SECRETS = {**SECRETS, "RABBITMQ_PASSWORD": "q" * 24}
__all__ = ["docker_compose"]  # the fixture, shared with test_compose.py


def _config(
    docker_compose: str, env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    return compose_config(
        docker_compose, env, tmp_path, files=(COMPOSE, OVERRIDE), secrets=RABBIT_SECRETS
    )


@pytest.fixture(scope="module")
def resolved(docker_compose: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    proc = _config(docker_compose, RABBIT_SECRETS, tmp_path_factory.mktemp("compose"))
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = yaml.safe_load(proc.stdout)
    return data


def test_the_override_matches_the_compose_spec_schema() -> None:
    proc = compose_spec_check(OVERRIDE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_beatflow_service_uses_rabbitmq_as_broker_and_redis_for_the_beat(
    resolved: dict[str, Any],
) -> None:
    services = resolved["services"]
    for name in BEATFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["BEATFLOW_BROKER_URL"] == f"amqp://beatflow:{'q' * 24}@rabbitmq:5672/beatflow"
        assert env["BEATFLOW_REDIS_URL"] == f"redis://:{'r' * 24}@redis:6379/0", name
        deps = services[name]["depends_on"]
        assert deps["rabbitmq"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name  # the base's stay
    # the base's per-service settings survive the merge
    assert services["beat-2"]["environment"]["BEATFLOW_INSTANCE"] == "beat-2"
    assert services["worker"]["environment"]["REMAP_SIGTERM"] == "SIGQUIT"


def test_rabbitmq_runs_non_root_hardened_health_checked_and_durable(
    resolved: dict[str, Any],
) -> None:
    rabbit = resolved["services"]["rabbitmq"]
    assert int(str(rabbit["user"]).split(":")[0]) != 0
    assert rabbit["read_only"] is True
    assert rabbit["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in rabbit["security_opt"]
    assert rabbit["healthcheck"]["test"][:2] == ["CMD", "rabbitmq-diagnostics"]
    assert {"cpus", "memory"} <= set(rabbit["deploy"]["resources"]["limits"])
    assert "ports" not in rabbit  # reached on the compose network only
    (volume,) = rabbit["volumes"]
    assert volume.split(":")[:2] == ["rabbitmq-data", "/var/lib/rabbitmq"]  # docker-compose 1.x
    assert rabbit["environment"]["RABBITMQ_DEFAULT_PASS"] == "q" * 24


def test_the_override_refuses_to_start_without_the_rabbitmq_password(
    docker_compose: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in RABBIT_SECRETS.items() if k != "RABBITMQ_PASSWORD"}
    proc = _config(docker_compose, env, tmp_path)
    assert proc.returncode != 0
    assert "set RABBITMQ_PASSWORD in .env (see .env.example)" in proc.stderr
    example = (ROOT / ".env.example").read_text().splitlines()
    assert "RABBITMQ_PASSWORD=" in example
