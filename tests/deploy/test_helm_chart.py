"""The Helm chart lints clean for every representative value set, and its values.schema.json and
template checks turn bad values away with a message that names the value."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import CHART, HELM_VALUE_SETS, helm_template_argv, run, tool

pytestmark = pytest.mark.usefixtures("k8s_tools")


@pytest.mark.parametrize("value_set", HELM_VALUE_SETS)
def test_the_chart_lints_clean_in_strict_mode(value_set: str) -> None:
    argv = [tool("helm"), "lint", "--strict", str(CHART)]
    if value_set != "default":
        argv += ["-f", str(CHART / "ci" / value_set)]
    proc = run(argv, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def test_notes_tell_how_to_reach_flower_and_the_metrics(tmp_path: Path) -> None:
    # `helm install --dry-run` needs a cluster, so render NOTES.txt as a named template instead.
    chart = tmp_path / "beatflow"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "notes" -}}\n' + notes + "{{- end -}}\n"
    )
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "notes" . | quote }}\n'
    )
    out = run(
        [
            tool("helm"),
            "template",
            "beatflow",
            str(chart),
            "--namespace",
            "jobs",
            "--show-only",
            "templates/notes.yaml",
        ]
    ).stdout
    text = yaml.safe_load(out)["data"]["notes"]
    assert "kubectl -n jobs port-forward svc/beatflow-flower 5555:5555" in text
    assert "kubectl -n jobs port-forward svc/beatflow-exporter 9808:9808" in text
    assert "get secret beatflow-flower" in text
    assert "deployment/beatflow-worker-long (1..10 replicas)" in text


BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    (
        "scale to zero",
        {
            "queues": [
                {
                    "name": "default",
                    "concurrency": 4,
                    "softTimeLimit": 10,
                    "timeLimit": 20,
                    "minReplicas": 0,
                    "maxReplicas": 3,
                    "targetPerReplica": 4,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                }
            ]
        },
        "minReplicas: Must be greater than or equal to 1",
    ),
    ("one beat", {"beat": {"replicas": 1}}, "beat.replicas: Must be greater than or equal to 2"),
    ("misspelt key", {"flowr": {"enabled": False}}, "Additional property flowr is not allowed"),
    ("queue name", {"queues": [{"name": "Big_Queue"}]}, "queues.0.name: Does not match pattern"),
    (
        "no limits",
        {
            "queues": [
                {
                    "name": "q",
                    "concurrency": 1,
                    "softTimeLimit": 1,
                    "timeLimit": 2,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "targetPerReplica": 1,
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ]
        },
        "queues.0.resources: limits is required",
    ),
    (
        "flower without auth",
        {"flower": {"auth": {"existingSecret": ""}}},
        "Flower never runs without authentication",
    ),
    (
        "short flower password",
        {"flower": {"auth": {"existingSecret": "", "password": "admin"}}},
        "flower.auth.password: Does not match pattern",
    ),
    (
        "visibility below time limit",
        {"config": {"visibilityTimeout": 100}},
        "config.visibilityTimeout (100) must exceed queues[default].timeLimit (360)",
    ),
    (
        "soft limit above hard",
        {
            "queues": [
                {
                    "name": "q",
                    "concurrency": 1,
                    "softTimeLimit": 50,
                    "timeLimit": 40,
                    "minReplicas": 1,
                    "maxReplicas": 2,
                    "targetPerReplica": 1,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                }
            ]
        },
        "queues[q]: softTimeLimit (50) must be below timeLimit (40)",
    ),
    ("bad anti-affinity", {"beat": {"antiAffinity": "sometimes"}}, "beat.antiAffinity"),
    (
        "no broker url",
        {"connections": {"existingSecret": ""}},
        "connections: set existingSecret, or both brokerUrl and databaseUrl",
    ),
]


@pytest.mark.parametrize(
    ("case", "values", "message"), BAD_VALUES, ids=[c for c, _, _ in BAD_VALUES]
)
def test_bad_values_are_rejected_with_a_message_naming_the_value(
    case: str, values: dict[str, Any], message: str, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = run(helm_template_argv([path]), check=False)
    assert proc.returncode != 0, f"{case}: helm accepted {values}"
    assert message in proc.stderr, proc.stderr
