"""One source for the Grafana dashboard: ``deploy/grafana/beatflow.json`` is mounted by compose's
Grafana directly and copied verbatim under ``k8s/base/`` and ``helm/beatflow/files/``, where the
kustomize ``configMapGenerator`` and the Helm template turn it into the sidecar's ConfigMap."""

from __future__ import annotations

from pathlib import Path

from deploy.copies import Copy

DASHBOARD = Path("deploy/grafana/beatflow.json")
HELM_DASHBOARD = Path("helm/beatflow/files/dashboards/beatflow.json")
K8S_DASHBOARD = Path("k8s/base/dashboards/beatflow.json")
# The ConfigMap name and the label kube-prometheus-stack's Grafana sidecar watches by default.
CONFIGMAP = "beatflow-grafana-dashboard"
SIDECAR_LABEL = ("grafana_dashboard", "1")


def dashboard_copies(root: Path) -> list[Copy]:
    """The dashboard's copies; JSON has no comments, so they are byte-identical to the source."""
    text = (root / DASHBOARD).read_text(encoding="utf-8")
    return [
        Copy(DASHBOARD, root / HELM_DASHBOARD, text),
        Copy(DASHBOARD, root / K8S_DASHBOARD, text),
    ]
