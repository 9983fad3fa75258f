"""docker-compose.yml validates offline (compose-spec schema and Debian's docker-compose) and
keeps its promises: ordered start-up on health checks, hardened containers, Redis with AOF and
noeviction, two beats, a scalable worker, Flower with auth, Prometheus on the one rules file,
Grafana on the one dashboard file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.dashboards import DASHBOARD
from deploy.rules import RULES
from tests.deploy.manifests import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SECRETS = {
    "REDIS_PASSWORD": "r" * 24,
    "POSTGRES_PASSWORD": "p" * 24,
    "BEATFLOW_FLOWER_PASSWORD": "f" * 24,
    "GRAFANA_ADMIN_PASSWORD": "g" * 24,
    "BEATFLOW_WEB_PASSWORD": "w" * 24,
    "BEATFLOW_WEB_SECRET_KEY": "k" * 32,
}
BEATFLOW_SERVICES = ("migrate", "worker", "beat-1", "beat-2", "flower", "web", "exporter")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


@pytest.fixture(scope="module")
def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        subprocess.run(
            ["bash", str(ROOT / "deploy" / "tools.sh")],
            capture_output=True,
            cwd=ROOT,
            timeout=600,
            check=False,
        )
        found = shutil.which("docker-compose")
    if found is None:
        if _in_ci():
            pytest.fail("docker-compose is required in CI (deploy/tools.sh installs it)")
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    return found


def compose_config(
    docker_compose: str,
    env: dict[str, str],
    tmp_path: Path,
    files: tuple[Path, ...] = (COMPOSE,),
    secrets: dict[str, str] = SECRETS,
) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` of ``files`` with an empty env file and ``env``; the variables
    named in ``secrets`` come from ``env`` only, never from this process's environment."""
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    clean = {k: v for k, v in os.environ.items() if k not in secrets}
    argv = [docker_compose, "--project-directory", str(ROOT)]
    for path in files:
        argv += ["-f", str(path)]
    return subprocess.run(
        [*argv, "--env-file", str(env_file), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
        check=False,
    )


def compose_spec_check(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema of ``path`` against the compose-spec schema it ships with (offline)."""
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_compose_file_matches_the_compose_spec_schema() -> None:
    proc = compose_spec_check(COMPOSE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docker_compose_resolves_the_file_when_every_secret_is_set(
    docker_compose: str, tmp_path: Path
) -> None:
    proc = compose_config(docker_compose, SECRETS, tmp_path)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    worker = resolved["services"]["worker"]
    assert worker["environment"]["BEATFLOW_BROKER_URL"] == f"redis://:{'r' * 24}@redis:6379/0"
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_start_while_a_password_is_unset(
    docker_compose: str, tmp_path: Path, missing: str
) -> None:
    env = {k: v for k, v in SECRETS.items() if k != missing}
    proc = compose_config(docker_compose, env, tmp_path)
    assert proc.returncode != 0
    assert f"set {missing} in .env (see .env.example)" in proc.stderr


def test_env_example_documents_every_required_variable_with_no_value() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert required == set(SECRETS)
    for name in required:
        assert example.get(name) == "", f"{name} must be listed in .env.example with no value"


def test_beatflow_containers_are_hardened_and_limited(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in BEATFLOW_SERVICES:
        svc = services[name]
        assert svc["user"] == "10001:10001", name
        assert svc["read_only"] is True, name
        assert svc["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
        assert "/tmp" in svc["tmpfs"], name
    for name, svc in services.items():
        limits = svc["deploy"]["resources"]["limits"]
        assert {"cpus", "memory"} <= set(limits), name
        assert svc.get("read_only") is True, name


def test_long_running_services_have_health_checks_and_start_in_order(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, svc in services.items():
        if name == "migrate":
            continue
        assert svc["healthcheck"]["test"][0] == "CMD", name
    for name in ("worker", "beat-1", "beat-2", "flower", "exporter"):
        deps = services[name]["depends_on"]
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
    assert services["worker"]["healthcheck"]["test"][1:4] == ["beatflow", "health", "worker"]
    assert services["beat-1"]["healthcheck"]["test"][1:4] == ["beatflow", "health", "beat"]


def test_redis_keeps_an_append_only_file_and_never_evicts(compose: dict[str, Any]) -> None:
    command = " ".join(compose["services"]["redis"]["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert "--requirepass" in command


def test_two_beats_and_a_worker_that_scales(compose: dict[str, Any]) -> None:
    services = compose["services"]
    beats = [n for n, s in services.items() if "beat" in s.get("command", [])]
    assert beats == ["beat-1", "beat-2"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert "-B" not in worker["command"] and "--beat" not in worker["command"]
    shutdown = next(
        float(a.split("=")[1])
        for a in worker["command"]
        if a.startswith("worker.soft_shutdown_timeout=")
    )
    assert int(worker["stop_grace_period"].rstrip("s")) >= shutdown + 15
    assert worker["environment"]["REMAP_SIGTERM"] == "SIGQUIT"


def test_flower_always_asks_for_a_password_given_in_the_environment(
    compose: dict[str, Any],
) -> None:
    flower = compose["services"]["flower"]
    # beatflow turns BEATFLOW_FLOWER_USER/PASSWORD into Flower's basic auth: nothing in argv.
    assert flower["command"][:4] == ["celery", "-A", "beatflow", "flower"]
    command = " ".join(flower["command"])
    assert "PASSWORD" not in command and "auth" not in command
    assert ":?" in flower["environment"]["BEATFLOW_FLOWER_PASSWORD"]
    assert all(p.startswith("127.0.0.1:") for p in flower["ports"])
    # its memory bound comes from BEATFLOW_FLOWER_MAX_TASKS: a --max_tasks flag would win
    assert "--max_tasks" not in command


def test_the_web_ui_asks_for_a_password_and_a_fixed_session_key(compose: dict[str, Any]) -> None:
    web = compose["services"]["web"]
    assert web["command"] == ["beatflow", "web", "--port", "8080"]
    for name in ("BEATFLOW_WEB_PASSWORD", "BEATFLOW_WEB_SECRET_KEY"):
        assert ":?" in web["environment"][name]
    assert "PASSWORD" not in " ".join(web["command"])
    assert all(p.startswith("127.0.0.1:") for p in web["ports"])
    assert "/healthz" in " ".join(web["healthcheck"]["test"])


def test_prometheus_loads_the_one_alert_rules_file(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"]}
    assert mounts["/etc/prometheus/rules"] == "./" + str(RULES.parent)
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert RULES.name.endswith(".yml") and (ROOT / RULES).exists()
    targets = [
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    ]
    assert "exporter:9808" in targets


def test_promtool_accepts_the_prometheus_config_with_the_rules_it_mounts(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if _in_ci():
            pytest.fail("promtool is required in CI (Debian package prometheus)")
        pytest.skip("promtool not installed (Debian package prometheus)")
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    # Point the container path at the repository's rules folder, as the compose mount does.
    config["rule_files"] = [str(ROOT / RULES.parent / Path(p).name) for p in config["rule_files"]]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [promtool, "check", "config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rule files found" in proc.stdout + proc.stderr


def test_grafana_is_provisioned_from_the_repository_files_and_asks_for_a_password(
    compose: dict[str, Any],
) -> None:
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":") for v in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == [
        "./deploy/grafana/provisioning",
        "/etc/grafana/provisioning",
        "ro",
    ]
    source, dashboards, mode = mounts["/etc/grafana/dashboards"]
    assert (source, mode) == ("./" + str(DASHBOARD.parent), "ro")
    assert mounts["/var/lib/grafana"][0] in compose["volumes"]

    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "beatflow.yaml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file" and provider["options"]["path"] == dashboards
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    prometheus = compose["services"]["prometheus"]
    container_port = prometheus["ports"][0].split(":")[-1]
    assert datasource["url"] == f"http://prometheus:{container_port}"
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards}/{DASHBOARD.name}" and (ROOT / DASHBOARD).is_file()

    assert ":?" in grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert all(p.startswith("127.0.0.1:") for p in grafana["ports"])
    assert int(grafana["user"].split(":")[0]) != 0
    assert grafana["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in grafana["security_opt"]


def test_host_services_puts_beatflow_on_the_hosts_network_and_services(tmp_path: Path) -> None:
    """deploy/compose/host-services.yml as podman-compose resolves it (offline, --dry-run): every
    beatflow service on the host's network, without the compose Redis and PostgreSQL to wait for,
    on the URLs and ports it is given, with rlimits Podman can set. tests/container runs the
    whole stack (debian-services.yml) in containers."""
    exe = str(Path(sys.executable).with_name("podman-compose"))
    env = {
        **{k: v for k, v in os.environ.items() if k not in SECRETS and "BEATFLOW_" not in k},
        **SECRETS,
        "BEATFLOW_BROKER_URL": "redis://127.0.0.1:6379/3",
        "BEATFLOW_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/bf",
        "FLOWER_PORT": "15555",
        "WEB_PORT": "18080",
        "METRICS_PORT": "19808",
    }
    argv = [exe, "--dry-run", "-f", str(COMPOSE)]
    argv += ["-f", str(ROOT / "deploy" / "compose" / "host-services.yml"), "config"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    class Loader(yaml.SafeLoader):
        """The resolved file still shows the x- anchors' !reset tags: read them as plain."""

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    services = yaml.load(proc.stdout, Loader=Loader)["services"]  # a SafeLoader
    for name in BEATFLOW_SERVICES:
        svc = services[name]
        assert svc["network_mode"] == "host", name
        assert not svc.get("depends_on"), name
        assert svc["ulimits"]["nofile"] == {"soft": 1024, "hard": 1024}, name
        assert svc["environment"]["BEATFLOW_BROKER_URL"] == env["BEATFLOW_BROKER_URL"], name
        assert svc["environment"]["BEATFLOW_DATABASE_URL"] == env["BEATFLOW_DATABASE_URL"], name
    assert services["web"]["environment"]["BEATFLOW_WEB_PORT"] == "18080"
    assert services["web"]["command"][-2:] == ["--port", "18080"]
    assert "--port=15555" in services["flower"]["command"]
    assert services["exporter"]["environment"]["BEATFLOW_METRICS_PORT"] == "19808"
