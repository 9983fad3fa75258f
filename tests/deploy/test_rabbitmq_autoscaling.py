"""RabbitMQ as the broker: the broker URL picks KEDA's trigger. The Helm chart (an amqp:// broker
URL, or rabbitmq.enabled when the URL sits in an existing Secret) and the k8s rabbitmq overlay
(the rabbitmq Component) scale each worker with one `rabbitmq` trigger per queue, its AMQP URL
read from a Secret through a TriggerAuthentication, never inline; validated against the strict
KEDA CRD schemas in ../shared/schemas like every other target (test_manifest_schemas.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import (
    CHART,
    SHARED_SCHEMAS,
    Obj,
    Rendered,
    helm_template_argv,
    load_all,
    render,
    run,
)

pytestmark = pytest.mark.usefixtures("k8s_tools")
RABBITMQ_TARGETS = ("helm:rabbitmq-values.yaml", "k8s/overlays/rabbitmq")
SCALED = ("keda.sh/v1alpha1", "ScaledObject")
AUTH = ("keda.sh/v1alpha1", "TriggerAuthentication")
SCHEMA_FILES = {
    SCALED: "keda.sh/scaledobject_v1alpha1.json",
    AUTH: "keda.sh/triggerauthentication_v1alpha1.json",
}


def helm(tmp_path: Path, values: dict[str, Any]) -> Rendered:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return Rendered("helm:custom", load_all(run(helm_template_argv((path,))).stdout))


def triggers(r: Rendered) -> dict[str, list[str]]:
    """ScaledObject name -> the types of its triggers."""
    return {
        so["metadata"]["name"]: [t["type"] for t in so["spec"]["triggers"]]
        for so in r.of_kind("ScaledObject")
    }


def secret_data(obj: Obj) -> dict[str, str]:
    if "stringData" in obj:
        return dict(obj["stringData"])
    return {k: base64.b64decode(v).decode() for k, v in obj.get("data", {}).items()}


@pytest.mark.parametrize("target", RABBITMQ_TARGETS)
def test_each_worker_scales_on_its_rabbitmq_queue_with_the_url_from_a_secret(target: str) -> None:
    r = render(target)
    assert triggers(r), f"{target}: no ScaledObject"
    for name, types in triggers(r).items():
        assert types.count("rabbitmq") == 1 and "redis" not in types, f"{name}: {types}"
    (auth,) = r.of_kind("TriggerAuthentication")  # the Redis one is gone
    refs = auth["spec"]["secretTargetRef"]
    assert [p["parameter"] for p in refs] == ["host"]
    (secret,) = [s for s in r.of_kind("Secret") if s["metadata"]["name"] == refs[0]["name"]]
    host = secret_data(secret)["host"]
    assert host.startswith("amqp://") and "@" in host
    for so in r.of_kind("ScaledObject"):
        for t in so["spec"]["triggers"]:
            assert host not in json.dumps(t), "the AMQP URL is inline in a trigger"
            if t["type"] == "rabbitmq":
                assert t["authenticationRef"]["name"] == auth["metadata"]["name"]


@pytest.mark.parametrize("target", RABBITMQ_TARGETS)
def test_the_uis_may_reach_rabbitmq(target: str) -> None:
    r = render(target)
    for ui in ("flower", "web"):
        (policy,) = [
            p for p in r.of_kind("NetworkPolicy") if p["metadata"]["name"].endswith(f"-{ui}")
        ]
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}
        assert {5672, 5671} <= ports, f"{target}: {ui} cannot reach RabbitMQ ({sorted(ports)})"


def test_the_rabbitmq_overlay_points_workers_and_keda_at_the_same_broker() -> None:
    from urllib.parse import urlsplit

    r = render("k8s/overlays/rabbitmq")
    env = [s for s in r.of_kind("Secret") if s["metadata"]["name"].startswith("beatflow-env-")]
    (env_secret,) = env
    data = secret_data(env_secret)
    broker = urlsplit(data["BEATFLOW_BROKER_URL"])
    assert broker.scheme == "amqp"
    assert urlsplit(data["BEATFLOW_REDIS_URL"]).scheme == "redis"  # beatflow's state stays there
    keda = urlsplit(secret_data(r.named("Secret", "beatflow-rabbitmq"))["host"])
    assert (keda.hostname, keda.port, keda.path, keda.username) == (
        broker.hostname,
        broker.port,
        broker.path,
        broker.username,
    )
    rabbit = r.named("Deployment", "beatflow-rabbitmq")
    assert rabbit["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_chart_follows_the_broker_url(tmp_path: Path) -> None:
    assert set(t for ts in triggers(render("helm:default")).values() for t in ts) == {
        "redis",
        "cpu",
    }
    url = "pyamqp://u:secret@mq.example:5672/prod"
    made = helm(
        tmp_path,
        {
            "connections": {
                "existingSecret": "",
                "brokerUrl": url,
                "databaseUrl": "postgresql+psycopg://u:p@pg:5432/db",
                "redisUrl": "redis://redis:6379/0",
            },
            "rabbitmq": {"existingSecret": ""},
        },
    )
    assert all("rabbitmq" in ts for ts in triggers(made).values())
    (secret,) = [s for s in made.of_kind("Secret") if s["metadata"]["name"].endswith("-rabbitmq")]
    assert secret_data(secret)["host"] == "amqp://u:secret@mq.example:5672/prod"  # KEDA's scheme
    env = next(s for s in made.of_kind("Secret") if "BEATFLOW_BROKER_URL" in secret_data(s))
    assert secret_data(env)["BEATFLOW_REDIS_URL"] == "redis://redis:6379/0"
    # The URL in an existing Secret: rabbitmq.enabled says so; KEDA reads Secret beatflow-rabbitmq.
    existing = helm(tmp_path, {"rabbitmq": {"enabled": True}})
    assert all("rabbitmq" in ts for ts in triggers(existing).values())
    (auth,) = existing.of_kind("TriggerAuthentication")
    assert auth["spec"]["secretTargetRef"][0]["name"] == "beatflow-rabbitmq"
    assert not [s for s in existing.of_kind("Secret") if "rabbitmq" in s["metadata"]["name"]]


@pytest.mark.skipif(not SHARED_SCHEMAS.is_dir(), reason="../shared/schemas is not present")
@pytest.mark.parametrize("target", RABBITMQ_TARGETS)
def test_the_rabbitmq_keda_objects_pass_the_strict_crd_schemas(target: str) -> None:
    import jsonschema

    r = render(target)
    checked = 0
    for obj in r.objects:
        name = SCHEMA_FILES.get((obj["apiVersion"], obj["kind"]))
        if name is None:
            continue
        schema = json.loads((SHARED_SCHEMAS / name).read_text())
        validator = jsonschema.validators.validator_for(schema)(schema)
        assert not [e.message for e in validator.iter_errors(obj)], obj["metadata"]["name"]
        checked += 1
        if obj["kind"] == "ScaledObject":  # a misspelt trigger field fails the same schema
            bad = json.loads(json.dumps(obj))
            trigger = next(t for t in bad["spec"]["triggers"] if t["type"] == "rabbitmq")
            trigger["authRef"] = trigger.pop("authenticationRef")
            assert list(validator.iter_errors(bad))
    assert checked == 3  # two ScaledObjects and the TriggerAuthentication


def test_the_chart_values_schema_refuses_a_non_amqp_keda_host(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"rabbitmq": {"enabled": True, "host": "http://mq:15672"}}))
    proc = run([*helm_template_argv((path,))], check=False)
    assert proc.returncode != 0 and "rabbitmq" in proc.stderr and "host" in proc.stderr
    assert (CHART / "ci" / "rabbitmq-values.yaml").is_file()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "existingSecret": "",
                "brokerUrl": "amqp://u:p@mq:5672/v",
                "databaseUrl": "postgresql://d",
            },
            "connections.redisUrl is required when connections.brokerUrl is RabbitMQ",
        ),
    ],
)
def test_a_rabbitmq_broker_without_redis_is_refused(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"connections": values}))
    proc = run(helm_template_argv((path,)), check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_the_uis_may_reach_a_redis_of_its_own_port(tmp_path: Path) -> None:
    r = helm(
        tmp_path,
        {
            "connections": {
                "existingSecret": "",
                "brokerUrl": "amqp://u:p@mq:5672/v",
                "databaseUrl": "postgresql://u:p@pg:5432/d",
                "redisUrl": "rediss://:p@redis.example:6380/0",
            },
            "rabbitmq": {"existingSecret": ""},
        },
    )
    policy = next(p for p in r.of_kind("NetworkPolicy") if p["metadata"]["name"].endswith("-web"))
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}
    assert {6380, 5672, 5671} <= ports
