"""The Helm chart's production knobs, each read off the rendered objects: `helm test`, the
ServiceAccount, name overrides, scheduling and extras in every pod, the prune CronJob, DAGs from
git, TLS to Redis and PostgreSQL, honorLabels, the UIs' egress to the configured ports, and a
connections Secret that `helm uninstall` removes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import (
    Obj,
    Rendered,
    command_line,
    component,
    containers,
    helm_template_argv,
    load_all,
    pod_spec,
    render,
    render_kustomize,
    run,
)

pytestmark = pytest.mark.usefixtures("k8s_tools")

PROD = "helm:production-values.yaml"
LONG_RUNNING = ("worker", "beat", "flower", "web", "exporter")


def _render_with(tmp_path: Path, values: dict[str, Any]) -> Rendered:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return Rendered("custom", load_all(run(helm_template_argv([path])).stdout))


def _long_running(r: Rendered) -> list[Obj]:
    return [o for o in r.of_kind("Deployment") if component(o) in LONG_RUNNING]


def _hook(obj: Obj) -> str | None:
    annotations: dict[str, str] = obj["metadata"].get("annotations") or {}
    return annotations.get("helm.sh/hook")


def test_helm_test_pings_the_workers_then_runs_a_smoke_dag_to_success() -> None:
    r = render("helm:default")
    (pod,) = [o for o in r.of_kind("Pod") if _hook(o) == "test"]
    spec = pod["spec"]
    (ping,) = spec["initContainers"]
    assert command_line(ping)[:5] == ["celery", "-A", "beatflow", "inspect", "ping"]
    (smoke,) = spec["containers"]
    assert command_line(smoke)[:5] == ["beatflow", "dags", "trigger", "example_fan_out", "--wait"]
    assert spec["restartPolicy"] == "Never"
    assert "hook-succeeded" in pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]


def test_every_pod_runs_as_the_service_account_that_carries_the_iam_annotations() -> None:
    r = render(PROD)
    (sa,) = r.of_kind("ServiceAccount")
    assert sa["metadata"]["name"] == "flow"
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/beatflow"
    }
    for obj in r.objects:
        spec = pod_spec(obj)
        if spec is not None and _hook(obj) is None:
            assert spec["serviceAccountName"] == "flow", obj["metadata"]["name"]
            assert spec["automountServiceAccountToken"] is False


def test_name_overrides_rename_every_object(tmp_path: Path) -> None:
    full = render(PROD)
    names = {o["metadata"]["name"] for o in full.objects}
    assert {"flow-worker-default", "flow-beat", "flow-web", "flow-flower", "flow-env"} <= names
    assert all(n.startswith("flow") for n in names), sorted(names)
    short = _render_with(tmp_path, {"nameOverride": "jobs"})
    beat = short.named("Deployment", "beatflow-jobs-beat")
    assert beat["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "jobs"
    (deny,) = [
        p for p in short.of_kind("NetworkPolicy") if p["metadata"]["name"].endswith("deny-ingress")
    ]
    assert deny["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "jobs"


def test_scheduling_and_extras_reach_every_long_running_pod() -> None:
    r = render(PROD)
    pods = _long_running(r)
    assert {component(o) for o in pods} == set(LONG_RUNNING)
    for obj in pods:
        spec = pod_spec(obj) or {}
        name = obj["metadata"]["name"]
        assert spec["tolerations"][0]["key"] == "dedicated", name
        assert "nodeAffinity" in spec["affinity"], name
        (spread,) = spec["topologySpreadConstraints"]
        selector = spread["labelSelector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == component(obj), name
        assert "vector-config" in {v["name"] for v in spec["volumes"]}, name
        assert [c["name"] for c in spec["containers"]][-1] == "log-shipper", name
        main = spec["containers"][0]
        assert "/etc/vector" in {m["mountPath"] for m in main["volumeMounts"]}, name
    beat = r.named("Deployment", "flow-beat")["spec"]["template"]["spec"]["affinity"]
    assert beat["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "nodeAffinity" in beat


def test_the_prune_cronjob_deletes_runs_and_asset_events_past_the_retention_one_at_a_time() -> None:
    r = render(PROD)
    (cron,) = r.of_kind("CronJob")
    assert cron["spec"]["schedule"] == "30 2 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    (c,) = [c for c in containers(cron) if c["name"] == "prune"]
    assert command_line(c)[:5] == ["beatflow", "db", "prune", "--older-than", "14d"]
    # it reads the dags folder (which DAGs consume each asset) as the beat does: git-synced
    spec = pod_spec(cron) or {}
    (init,) = spec["initContainers"]
    assert init["name"] == "git-sync"
    assert {m["mountPath"]: m for m in c["volumeMounts"]}["/git"]["readOnly"] is True
    assert not render("helm:default").of_kind("CronJob"), "prune is opt-in"


def test_git_sync_clones_the_pinned_ref_before_any_process_loads_dags() -> None:
    r = render(PROD)
    config = r.config()
    assert config["BEATFLOW_DAGS_FOLDER"] == "/git/current/beatflow/dags"
    for obj in _long_running(r):
        spec = pod_spec(obj) or {}
        (init,) = spec["initContainers"]
        env = {e["name"]: e.get("value") for e in init["env"]}
        assert env["GITSYNC_REF"] == "v2026.11.30"
        assert env["GITSYNC_ONE_TIME"] == "true"
        assert init["envFrom"] == [{"secretRef": {"name": "git-credentials"}}]
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["/git"]["readOnly"] is True


def test_tls_options_reach_the_urls_and_the_ca_certificates_are_mounted() -> None:
    r = render(PROD)
    secret = r.named("Secret", "flow-env")
    broker = secret["stringData"]["BEATFLOW_BROKER_URL"]
    database = secret["stringData"]["BEATFLOW_DATABASE_URL"]
    assert broker.startswith("rediss://") and "ssl_cert_reqs=required" in broker
    assert "ssl_ca_certs=/etc/beatflow/tls/redis/ca.crt" in broker
    assert "sslmode=verify-full" in database
    assert "sslrootcert=/etc/beatflow/tls/postgres/ca.crt" in database
    for obj in _long_running(r):
        spec = pod_spec(obj) or {}
        secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        assert {"redis-ca", "postgres-ca"} <= secrets, obj["metadata"]["name"]


def test_tls_to_redis_refuses_a_plain_redis_url(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "connections": {
                    "existingSecret": "",
                    "brokerUrl": "redis://:pw@redis:6379/0",
                    "databaseUrl": "postgresql+psycopg://u:p@pg/db",
                },
                "tls": {"redis": {"enabled": True}},
            }
        )
    )
    proc = run(helm_template_argv([path]), check=False)
    assert proc.returncode != 0
    assert "tls.redis.enabled: connections.brokerUrl must be a rediss:// URL" in proc.stderr


@pytest.mark.parametrize("target", ["helm:default", PROD, "k8s/base"])
def test_the_service_monitor_keeps_the_exporters_instance_label(target: str) -> None:
    r = render_kustomize(target) if target.startswith("k8s") else render(target)
    (monitor,) = r.of_kind("ServiceMonitor")
    assert all(e["honorLabels"] is True for e in monitor["spec"]["endpoints"])


def test_the_uis_may_reach_redis_on_the_configured_port() -> None:
    r = render(PROD)
    for name in ("flow-flower", "flow-web"):
        policy = r.named("NetworkPolicy", name)
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert 6380 in ports, f"{name}: the broker URL's port is not allowed: {ports}"


def test_the_prod_overlay_lets_the_uis_reach_its_tls_redis_port() -> None:
    r = render_kustomize("k8s/overlays/prod")
    for name in ("beatflow-flower", "beatflow-web"):
        policy = r.named("NetworkPolicy", name)
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert 6380 in ports, f"{name}: {ports}"


def test_helm_uninstall_removes_the_connections_secret() -> None:
    r = render(PROD)
    secret = r.named("Secret", "flow-env")
    annotations = secret["metadata"].get("annotations") or {}
    # Hooks and resource-policy: keep are left behind by `helm uninstall`.
    assert "helm.sh/hook" not in annotations
    assert "helm.sh/resource-policy" not in annotations
    hook_copy = r.named("Secret", "flow-migrate-env")
    policy = hook_copy["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert "hook-succeeded" in policy
    migrate = r.named("Job", "flow-migrate")
    (c,) = list(containers(migrate))
    assert c["envFrom"] == [{"secretRef": {"name": "flow-migrate-env"}}]
    for obj in r.objects:
        assert (obj["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") is None
