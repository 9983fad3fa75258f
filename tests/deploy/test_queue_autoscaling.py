"""The queues are named once (BEATFLOW_QUEUES / Helm's queues list) and everything else follows:
each has one worker Deployment consuming it and one autoscaler whose triggers cover every Redis
list kombu keeps for it (priority sub-lists included), summed by KEDA's formula."""

from __future__ import annotations

import re

import pytest
import yaml

from deploy.queues import (
    broker_keys,
    broker_lists,
    rabbitmq_formula,
    rabbitmq_trigger_name,
    scaling_formula,
)
from tests.deploy.manifests import (
    CHART,
    Obj,
    Rendered,
    all_targets,
    command_line,
    component,
    render,
)

pytestmark = pytest.mark.usefixtures("k8s_tools")
TARGETS = all_targets()
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def worker_queues(r: Rendered) -> dict[str, list[str]]:
    """Worker Deployment name -> the queues its `celery worker -Q` consumes."""
    out = {}
    for obj in r.of_kind("Deployment"):
        if component(obj) != "worker":
            continue
        argv = command_line(obj["spec"]["template"]["spec"]["containers"][0])
        assert "worker" in argv and "-Q" in argv, f"{obj['metadata']['name']}: no -Q"
        out[obj["metadata"]["name"]] = argv[argv.index("-Q") + 1].split(",")
    return out


def evaluate(formula: str, values: dict[str, float]) -> float:
    """KEDA's formula for plain sums and max()/min(), evaluated over trigger values."""
    unknown = set(_IDENT.findall(formula)) - set(values) - {"max", "min"}
    assert not unknown, f"formula names no trigger: {unknown}"
    result: float = eval(formula, {"__builtins__": {}, "max": max, "min": min}, dict(values))
    return result


@pytest.mark.parametrize("target", TARGETS)
def test_every_configured_queue_has_exactly_one_worker_deployment(target: str) -> None:
    r = render(target)
    configured = r.config()["BEATFLOW_QUEUES"].split(",")
    consumed = [q for qs in worker_queues(r).values() for q in qs]
    assert sorted(consumed) == sorted(configured), (
        f"{target}: BEATFLOW_QUEUES={configured} but workers consume {consumed}"
    )


@pytest.mark.parametrize("target", TARGETS)
def test_each_worker_is_scaled_on_every_redis_list_of_its_queues(target: str) -> None:
    r = render(target)
    scaled = {so["spec"]["scaleTargetRef"]["name"]: so for so in r.of_kind("ScaledObject")}
    hpas = {h["spec"]["scaleTargetRef"]["name"] for h in r.of_kind("HorizontalPodAutoscaler")}
    for deployment, queues in worker_queues(r).items():
        if deployment in hpas and not scaled:
            continue  # KEDA off: a CPU HPA (checked below)
        so = scaled.pop(deployment, None)
        assert so is not None, f"{target}: no ScaledObject scales {deployment}"
        _check_scaled_object(so, queues)
    assert not scaled, f"{target}: ScaledObjects for no worker: {sorted(scaled)}"


def _check_scaled_object(so: Obj, queues: list[str]) -> None:
    if any(t["type"] == "rabbitmq" for t in so["spec"]["triggers"]):
        _check_rabbitmq_scaled_object(so, queues)
    else:
        _check_redis_scaled_object(so, queues)
    _check_scaling_behaviour(so)


def _check_rabbitmq_scaled_object(so: Obj, queues: list[str]) -> None:
    """RabbitMQ: one ``rabbitmq`` trigger per queue (ready messages over AMQP), no Redis list."""
    name = so["metadata"]["name"]
    spec = so["spec"]
    assert not [t for t in spec["triggers"] if t["type"] == "redis"], f"{name}: redis and rabbitmq"
    mq = [t for t in spec["triggers"] if t["type"] == "rabbitmq"]
    assert sorted(t["metadata"]["queueName"] for t in mq) == sorted(queues), (
        f"{name}: rabbitmq triggers drift from the queues {queues!r}"
    )
    modifiers = spec["advanced"]["scalingModifiers"]
    for t in mq:
        meta = t["metadata"]
        assert t["name"] == rabbitmq_trigger_name(meta["queueName"])
        assert meta["protocol"] == "amqp" and meta["mode"] == "QueueLength", (
            f"{name}: the trigger must read ready messages over AMQP (no management plugin)"
        )
        assert float(meta["value"]) == float(modifiers["target"])
        assert not {"host", "hostFromEnv", "password"} & set(meta), f"{name}: inline credentials"
        assert t["authenticationRef"]["name"], f"{name}: RabbitMQ URL not from a Secret"
    values = {t["name"]: 10.0**i for i, t in enumerate(mq)}
    assert evaluate(modifiers["formula"], values) == sum(values.values())
    if any(t["type"] == "prometheus" for t in spec["triggers"]):
        assert modifiers["formula"].startswith("max(")
    else:
        assert modifiers["formula"] == rabbitmq_formula(queues)


def _check_redis_scaled_object(so: Obj, queues: list[str]) -> None:
    name = so["metadata"]["name"]
    spec = so["spec"]
    redis = [t for t in spec["triggers"] if t["type"] == "redis"]
    assert sorted(t["metadata"]["listName"] for t in redis) == sorted(broker_keys(queues)), (
        f"{name}: redis triggers drift from the queues' lists {broker_keys(queues)!r}"
    )
    assert {t["name"] for t in redis} == {
        lst.trigger_name for q in queues for lst in broker_lists(q)
    }
    modifiers = spec["advanced"]["scalingModifiers"]
    assert float(modifiers["target"]) > 0
    assert modifiers.get("metricType", "AverageValue") != "Utilization"
    # The formula adds every list: a message at any priority counts once.
    values = {t["name"]: 0.0 for t in spec["triggers"] if t.get("name")}
    for i, t in enumerate(redis):
        values[t["name"]] = 10.0**i
    assert evaluate(modifiers["formula"], values) == sum(10.0**i for i in range(len(redis)))
    if any(t["type"] == "prometheus" for t in spec["triggers"]):
        assert modifiers["formula"].startswith("max(")
    else:
        assert modifiers["formula"] == scaling_formula(queues)
    for t in redis:
        assert t["authenticationRef"]["name"], f"{name}: Redis password not from a Secret"


def _check_scaling_behaviour(so: Obj) -> None:
    name = so["metadata"]["name"]
    spec = so["spec"]
    assert any(t["type"] == "cpu" for t in spec["triggers"]), f"{name}: no CPU trigger"
    # KEDA rejects a fallback next to a CPU trigger (CheckFallbackValid).
    assert "fallback" not in spec
    assert spec["minReplicaCount"] >= 1, f"{name}: scale-to-zero strands ETA/countdown tasks"
    assert spec["maxReplicaCount"] >= spec["minReplicaCount"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 60
    assert spec["cooldownPeriod"] >= 60


@pytest.mark.parametrize("target", TARGETS)
def test_without_keda_each_worker_gets_a_cpu_hpa(target: str) -> None:
    r = render(target)
    if r.of_kind("ScaledObject"):
        assert not r.of_kind("HorizontalPodAutoscaler")
        return
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in r.of_kind("HorizontalPodAutoscaler")}
    assert set(hpas) == set(worker_queues(r))
    for hpa in hpas.values():
        assert hpa["spec"]["minReplicas"] >= 1
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


@pytest.mark.parametrize("target", TARGETS)
def test_the_keda_trigger_authentication_reads_the_broker_credentials_from_a_secret(
    target: str,
) -> None:
    r = render(target)
    refs = {
        t["authenticationRef"]["name"]
        for so in r.of_kind("ScaledObject")
        for t in so["spec"]["triggers"]
        if "authenticationRef" in t
    }
    for ref in refs:
        auth = r.named("TriggerAuthentication", ref)
        params = {p["parameter"] for p in auth["spec"]["secretTargetRef"]}
        assert {"address", "password"} <= params or params == {"host"}, (
            f"{target}: {ref} reads neither the Redis password nor the AMQP URL from a Secret"
        )


def test_helm_defaults_and_the_kustomize_base_name_the_same_queues() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    helm_queues = [q["name"] for q in values["queues"]]
    assert render("k8s/base").config()["BEATFLOW_QUEUES"].split(",") == helm_queues


def test_the_drift_check_fails_when_a_priority_list_is_missing() -> None:
    so = render("k8s/base").named("ScaledObject", "beatflow-worker-default")
    broken = {
        **so,
        "spec": {
            **so["spec"],
            "triggers": [t for t in so["spec"]["triggers"] if t.get("name") != "default_p9"],
        },
    }
    with pytest.raises(AssertionError, match="drift"):
        _check_scaled_object(broken, ["default"])


def test_the_autoscaling_bench_simulates_the_shipped_parameters() -> None:
    import importlib.util
    import sys

    from tests.deploy.manifests import ROOT

    spec = importlib.util.spec_from_file_location(
        "bench_autoscale", ROOT / "bench" / "bench_autoscale.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    shipped = bench.Params()
    for target in ("k8s/base", "helm:default"):
        r = render(target)
        so = next(
            s for s in r.of_kind("ScaledObject") if s["metadata"]["name"].endswith("-default")
        )
        spec_ = so["spec"]
        behavior = spec_["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        down = {p["type"]: p["value"] for p in behavior["scaleDown"]["policies"]}
        up = {p["type"]: p["value"] for p in behavior["scaleUp"]["policies"]}
        worker = r.named("Deployment", so["spec"]["scaleTargetRef"]["name"])
        argv = command_line(worker["spec"]["template"]["spec"]["containers"][0])
        assert (
            float(spec_["advanced"]["scalingModifiers"]["target"]),
            spec_["minReplicaCount"],
            spec_["maxReplicaCount"],
            spec_["pollingInterval"],
            behavior["scaleDown"]["stabilizationWindowSeconds"],
            down,
            up,
            int(argv[argv.index("--concurrency") + 1]),
        ) == (
            shipped.target,
            shipped.min_replicas,
            shipped.max_replicas,
            shipped.polling_interval,
            shipped.scale_down_window,
            {"Percent": shipped.scale_down_percent, "Pods": shipped.scale_down_pods},
            {"Percent": shipped.scale_up_percent, "Pods": shipped.scale_up_pods},
            shipped.concurrency,
        ), f"{target} drifted from bench/bench_autoscale.py Params()"


def test_keda_reads_the_same_redis_database_the_dev_workers_use() -> None:
    import base64
    from urllib.parse import urlsplit

    r = render("k8s/overlays/dev")

    def secret(prefix: str) -> dict[str, str]:
        (obj,) = [s for s in r.of_kind("Secret") if s["metadata"]["name"].startswith(prefix)]
        return {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}

    broker = urlsplit(secret("beatflow-env-")["BEATFLOW_BROKER_URL"])
    keda = secret("beatflow-redis")
    assert keda["address"] == f"{broker.hostname}:{broker.port}"
    assert keda["password"] == broker.password
    for so in r.of_kind("ScaledObject"):
        for t in so["spec"]["triggers"]:
            if t["type"] == "redis":
                assert t["metadata"]["databaseIndex"] == broker.path.lstrip("/")
