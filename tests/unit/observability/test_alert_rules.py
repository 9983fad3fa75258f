"""The alert rules file: valid for promtool, every alert unit-tested with `promtool test rules`
(a firing case each), the alerts the platform promises are there, and the k8s/Helm copies match."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import rules as rules_sync

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "platform/beatflow/observability/rules/beatflow.rules.yml"
TESTS = Path(__file__).resolve().parent / "rules_test.yml"
PROMISED = {
    "BeatflowNoBeatLeader",
    "BeatflowBeatLoopStalled",
    "BeatflowBeatFailoversFlapping",
    "BeatflowDagSlaMissed",
    "BeatflowDagRepeatedFailures",
    "BeatflowStuckTaskRuns",
    "BeatflowQueueBacklogGrowing",
    "BeatflowNoWorkerUp",
    "BeatflowDeadLettersPresent",
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool not found: install Debian's prometheus package (make deps-system)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
        check=False,
    )


def _alerts() -> set[str]:
    doc: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_promtool_accepts_the_rules_file() -> None:
    result = _run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_rule_passes_its_promtool_unit_tests() -> None:
    result = _run("test", "rules", TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_the_alerts_the_platform_promises_exist() -> None:
    assert _alerts() >= PROMISED


def test_every_alert_has_a_promtool_case_where_it_fires_and_one_where_it_does_not() -> None:
    doc: dict[str, Any] = yaml.safe_load(TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert _alerts() - firing == set()
    assert _alerts() - quiet == set()


def test_the_kubernetes_and_helm_copies_match_the_rules_file() -> None:
    stale = rules_sync.stale_copies(ROOT)
    assert stale == [], f"run `python -m deploy.rules`; stale: {stale}"
