"""Fixtures for the deployment tests: the kubectl and helm binaries (fetched by deploy/tools.sh),
skipped on a laptop without them and required in CI."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.deploy.manifests import ROOT, TOOLS


def _require(what: str, reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is required in CI: {reason}")
    pytest.skip(f"{what} not available: {reason}")


@pytest.fixture(scope="session")
def k8s_tools() -> None:
    """kubectl and helm in .tools/bin, fetched once (deploy/tools.sh is idempotent)."""
    if not ((TOOLS / "kubectl").exists() and (TOOLS / "helm").exists()):
        proc = subprocess.run(
            ["bash", str(ROOT / "deploy" / "tools.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        if proc.returncode != 0:
            _require("kubectl/helm", f"deploy/tools.sh failed: {proc.stderr.strip()[-500:]}")
