"""The alert rules have one source; the k8s PrometheusRule and the Helm chart's copy must match
it (run `make sync-rules` / `python -m beatflow.deploy.rules` after editing the rules)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from beatflow.deploy.rules import HELM_COPY, K8S_RULE, RULES, main, stale_copies, write_copies
from tests.deploy.manifests import ROOT, render


def test_the_k8s_and_helm_copies_match_the_rules_file() -> None:
    stale = stale_copies(ROOT)
    assert not stale, f"out of date with {RULES}: {stale}; run `python -m beatflow.deploy.rules`"


@pytest.mark.usefixtures("k8s_tools")
@pytest.mark.parametrize("target", ["k8s/base", "helm:default"])
def test_the_rendered_prometheus_rule_holds_exactly_the_source_groups(target: str) -> None:
    source = yaml.safe_load((ROOT / RULES).read_text())
    (rule,) = render(target).of_kind("PrometheusRule")
    assert rule["spec"] == source


def test_a_changed_rules_file_makes_the_check_fail_until_synced(tmp_path: Path) -> None:
    for rel in (RULES, HELM_COPY, K8S_RULE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    with (tmp_path / RULES).open("a") as f:
        f.write("  - name: extra\n    rules: []\n")
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert set(write_copies(tmp_path)) == {tmp_path / HELM_COPY, tmp_path / K8S_RULE}
    assert main(["--check", "--root", str(tmp_path)]) == 0
    wrapped = yaml.safe_load((tmp_path / K8S_RULE).read_text())
    assert wrapped["spec"]["groups"][-1] == {"name": "extra", "rules": []}
