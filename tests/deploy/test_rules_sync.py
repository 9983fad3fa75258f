"""The alert rules and the Grafana dashboard have one source each; the k8s and Helm copies must
match them (run `make sync-rules` / `python -m deploy.rules` after editing a source), and
the rendered PrometheusRule and dashboard ConfigMap must hold exactly the source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from deploy.dashboards import (
    CONFIGMAP,
    DASHBOARD,
    HELM_DASHBOARD,
    K8S_DASHBOARD,
    SIDECAR_LABEL,
)
from deploy.rules import HELM_COPY, K8S_RULE, RULES, main, stale_copies, write_copies
from tests.deploy.manifests import ROOT, helm_template_argv, load_all, render, run

SOURCES_AND_COPIES = (RULES, HELM_COPY, K8S_RULE, DASHBOARD, HELM_DASHBOARD, K8S_DASHBOARD)


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A tmp_path holding the sources and their copies as they are in the repository."""
    for rel in SOURCES_AND_COPIES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_k8s_and_helm_copies_match_the_rules_file_and_the_dashboard() -> None:
    stale = stale_copies(ROOT)
    assert not stale, f"out of date with {RULES} or {DASHBOARD}: {stale}; run `make sync-rules`"


@pytest.mark.usefixtures("k8s_tools")
@pytest.mark.parametrize("target", ["k8s/base", "helm:default"])
def test_the_rendered_prometheus_rule_holds_exactly_the_source_groups(target: str) -> None:
    source = yaml.safe_load((ROOT / RULES).read_text())
    (rule,) = render(target).of_kind("PrometheusRule")
    assert rule["spec"] == source


@pytest.mark.usefixtures("k8s_tools")
@pytest.mark.parametrize("target", ["k8s/base", "k8s/overlays/prod", "helm:default"])
def test_the_rendered_dashboard_config_map_holds_exactly_the_source_json(target: str) -> None:
    configmap = render(target).named("ConfigMap", CONFIGMAP)
    key, value = SIDECAR_LABEL
    assert configmap["metadata"]["labels"][key] == value
    assert configmap["data"] == {DASHBOARD.name: (ROOT / DASHBOARD).read_text(encoding="utf-8")}
    assert json.loads(configmap["data"][DASHBOARD.name])["uid"] == "beatflow-overview"


@pytest.mark.usefixtures("k8s_tools")
def test_the_helm_dashboard_config_map_can_be_turned_off() -> None:
    off = load_all(run([*helm_template_argv(), "--set", "grafanaDashboard.enabled=false"]).stdout)
    assert [o for o in off if o["kind"] == "ConfigMap" and "grafana" in o["metadata"]["name"]] == []


def test_a_changed_rules_file_makes_the_check_fail_until_synced(repo_copy: Path) -> None:
    with (repo_copy / RULES).open("a") as f:
        f.write("  - name: extra\n    rules: []\n")
    assert main(["--check", "--root", str(repo_copy)]) == 1
    assert set(write_copies(repo_copy)) == {repo_copy / HELM_COPY, repo_copy / K8S_RULE}
    assert main(["--check", "--root", str(repo_copy)]) == 0
    wrapped = yaml.safe_load((repo_copy / K8S_RULE).read_text())
    assert wrapped["spec"]["groups"][-1] == {"name": "extra", "rules": []}


def test_a_changed_dashboard_makes_the_check_fail_until_synced(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dashboard = json.loads((repo_copy / DASHBOARD).read_text())
    dashboard["title"] = "beatflow (edited)"
    (repo_copy / DASHBOARD).write_text(json.dumps(dashboard, indent=2) + "\n")
    assert main(["--check", "--root", str(repo_copy)]) == 1
    assert f"is out of date with {DASHBOARD}" in capsys.readouterr().err
    written = set(write_copies(repo_copy))
    assert written == {repo_copy / HELM_DASHBOARD, repo_copy / K8S_DASHBOARD}
    assert main(["--check", "--root", str(repo_copy)]) == 0
    for copy in (HELM_DASHBOARD, K8S_DASHBOARD):
        assert json.loads((repo_copy / copy).read_text())["title"] == "beatflow (edited)"


def test_an_edited_copy_makes_the_check_fail_until_synced(repo_copy: Path) -> None:
    (repo_copy / K8S_DASHBOARD).write_text("{}\n")
    assert main(["--check", "--root", str(repo_copy)]) == 1
    assert write_copies(repo_copy) == [repo_copy / K8S_DASHBOARD]
    assert (repo_copy / K8S_DASHBOARD).read_bytes() == (ROOT / DASHBOARD).read_bytes()
