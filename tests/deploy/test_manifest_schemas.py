"""Every object that kustomize and Helm render validates: built-in kinds against the Kubernetes
schemas (strict: a misspelt field fails), every kind through the cloudcoil pydantic models with a
lossless round trip, and KEDA / Prometheus-operator kinds against ../shared/schemas when present."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.manifests import SHARED_SCHEMAS, Obj, all_targets, render

# The chart's minimum (Chart.yaml kubeVersion) and the kubectl it is rendered with.
K8S_VERSIONS = ("1.25.0", "1.31.0")
CRD_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
SHARED = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh/scaledobject_v1alpha1.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda.sh/triggerauthentication_v1alpha1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com/servicemonitor_v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com/prometheusrule_v1.json",
}

pytestmark = pytest.mark.usefixtures("k8s_tools")


def _label(o: Obj) -> str:
    return f"{o['kind']}/{o['metadata']['name']}"


def differences(original: Any, dumped: Any, path: str = "") -> list[str]:
    """Where ``dumped`` differs from ``original``: lost fields, added fields, changed values."""
    if isinstance(original, dict) and isinstance(dumped, dict):
        out = [
            f"{path}/{k}: dropped by the model (unknown field?)"
            for k in original
            if k not in dumped
        ]
        out += [f"{path}/{k}: added by the model" for k in dumped if k not in original]
        for key in original.keys() & dumped.keys():
            out += differences(original[key], dumped[key], f"{path}/{key}")
        return out
    if isinstance(original, list) and isinstance(dumped, list):
        if len(original) != len(dumped):
            return [f"{path}: {len(original)} items became {len(dumped)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(original, dumped, strict=True))
            for d in differences(a, b, f"{path}/{i}")
        ]
    return [] if original == dumped else [f"{path}: {original!r} became {dumped!r}"]


@pytest.mark.parametrize("target", all_targets())
def test_built_in_objects_pass_strict_kubernetes_schemas(target: str) -> None:
    import kubernetes_validate

    failures = []
    for obj in render(target).objects:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                failures.append(f"{_label(obj)} (k8s {version}) at {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                failures.append(f"{_label(obj)}: {exc.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("target", all_targets())
def test_every_object_round_trips_losslessly_through_its_cloudcoil_model(target: str) -> None:
    from cloudcoil.resources import parse

    failures = []
    for obj in render(target).objects:
        model = parse(obj)
        assert type(model).__module__.startswith("cloudcoil.models."), (
            f"{_label(obj)}: no cloudcoil model for {obj['apiVersion']} {obj['kind']}"
        )
        dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)
        failures += [f"{_label(obj)}{d}" for d in differences(obj, dumped)]
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not SHARED_SCHEMAS.is_dir(), reason="../shared/schemas is not present")
@pytest.mark.parametrize("target", all_targets())
def test_custom_resources_pass_the_strict_crd_schemas_in_shared(target: str) -> None:
    import jsonschema

    failures = []
    for obj in render(target).objects:
        name = SHARED.get((obj["apiVersion"], obj["kind"]))
        if name is None:
            assert not obj["apiVersion"].startswith(CRD_GROUPS), f"no schema for {_label(obj)}"
            continue
        schema = json.loads((SHARED_SCHEMAS / name).read_text())
        validator = jsonschema.validators.validator_for(schema)(schema)
        for error in validator.iter_errors(obj):
            where = "/".join(str(p) for p in error.path)
            failures.append(f"{_label(obj)} at {where}: {error.message}")
    assert not failures, "\n".join(failures)


def test_the_round_trip_check_catches_a_misspelt_field() -> None:
    from cloudcoil.resources import parse

    obj = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "x"},
        "spec": {
            "scaleTargetRef": {"name": "x"},
            "maxReplicaCount": 3,
            "cooldownPeriods": 10,
            "triggers": [{"type": "cpu", "metadata": {"value": "1"}}],
        },
    }
    dumped = parse(obj).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert differences(obj, dumped) == [
        "/spec/cooldownPeriods: dropped by the model (unknown field?)"
    ]


@pytest.mark.skipif(not SHARED_SCHEMAS.is_dir(), reason="../shared/schemas is not present")
def test_the_crd_schema_check_catches_a_misspelt_trigger_field() -> None:
    import jsonschema

    schema = json.loads((SHARED_SCHEMAS / SHARED[("keda.sh/v1alpha1", "ScaledObject")]).read_text())
    so = render("k8s/base").named("ScaledObject", "beatflow-worker-default")
    bad = json.loads(json.dumps(so))
    bad["spec"]["triggers"][0]["authRef"] = bad["spec"]["triggers"][0].pop("authenticationRef")
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert not list(validator.iter_errors(so))
    assert [e.message for e in validator.iter_errors(bad)] == [
        "Additional properties are not allowed ('authRef' was unexpected)"
    ]
