"""One source for the alert rules: ``observability/rules/beatflow.rules.yml`` is read by
compose's Prometheus directly and copied, by ``python -m deploy.rules``, into the two
places Kubernetes tooling can reach (kustomize and Helm refuse files outside their roots). The same
command (``make sync-rules``) also syncs the Grafana dashboard's copies (``dashboards.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deploy import copies
from deploy.copies import Copy
from deploy.dashboards import dashboard_copies

RULES = Path("platform/beatflow/observability/rules/beatflow.rules.yml")
HELM_COPY = Path("helm/beatflow/files/beatflow.rules.yml")
K8S_RULE = Path("k8s/base/prometheusrule.yaml")
_GENERATED = (
    "# Generated from {src} by `python -m deploy.rules` (make sync-rules):\n"
    "# edit that file, not this one.\n"
)
_K8S_HEAD = """\
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: beatflow
  labels:
    app.kubernetes.io/component: alerts
spec:
"""


def rule_copies(root: Path) -> list[Copy]:
    """The files that must be kept identical (modulo wrapping) to the rules file."""
    rules = (root / RULES).read_text(encoding="utf-8")
    header = _GENERATED.format(src=RULES)
    body = "".join(_strip_doc_start(rules).splitlines(keepends=True))
    indented = "".join(("  " + line) if line.strip() else line for line in body.splitlines(True))
    return [
        Copy(RULES, root / HELM_COPY, header + body),
        Copy(RULES, root / K8S_RULE, header + _K8S_HEAD + indented),
    ]


def derived_copies(root: Path) -> list[Copy]:
    """Every synced copy: the alert rules' and the Grafana dashboard's."""
    return [*rule_copies(root), *dashboard_copies(root)]


def stale_copies(root: Path) -> list[Path]:
    """Derived files whose content differs from what their source produces."""
    return [c.path for c in copies.stale(derived_copies(root))]


def write_copies(root: Path) -> list[Path]:
    """Rewrite the stale derived files; return the ones written."""
    return copies.write(derived_copies(root))


def _strip_doc_start(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if line.rstrip() != "---")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.rules", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a copy is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root")
    args = parser.parse_args(argv)
    if args.check:
        stale = copies.stale(derived_copies(args.root))
        for c in stale:
            print(
                f"{c.path} is out of date with {c.source}: run `python -m deploy.rules`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path in write_copies(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
