"""One source for the alert rules: ``observability/rules/beatflow.rules.yml`` is read by
compose's Prometheus directly and copied, by ``python -m beatflow.deploy.rules``, into the two
places Kubernetes tooling can reach (kustomize and Helm refuse files outside their roots)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

RULES = Path("platform/beatflow/observability/rules/beatflow.rules.yml")
HELM_COPY = Path("helm/beatflow/files/beatflow.rules.yml")
K8S_RULE = Path("k8s/base/prometheusrule.yaml")
_GENERATED = (
    "# Generated from {src} by `python -m beatflow.deploy.rules` (make sync-rules):\n"
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


@dataclass(frozen=True, slots=True)
class Copy:
    """A file derived from the rules file, and the text it must hold."""

    path: Path
    text: str


def derived_copies(root: Path) -> list[Copy]:
    """The files that must be kept identical (modulo wrapping) to the rules file."""
    rules = (root / RULES).read_text(encoding="utf-8")
    header = _GENERATED.format(src=RULES)
    body = "".join(_strip_doc_start(rules).splitlines(keepends=True))
    indented = "".join(("  " + line) if line.strip() else line for line in body.splitlines(True))
    return [
        Copy(root / HELM_COPY, header + body),
        Copy(root / K8S_RULE, header + _K8S_HEAD + indented),
    ]


def stale_copies(root: Path) -> list[Path]:
    """Derived files whose content differs from what the rules file produces."""
    return [
        c.path
        for c in derived_copies(root)
        if not c.path.exists() or c.path.read_text(encoding="utf-8") != c.text
    ]


def write_copies(root: Path) -> list[Path]:
    """Rewrite the stale derived files; return the ones written."""
    written = []
    for c in derived_copies(root):
        if not c.path.exists() or c.path.read_text(encoding="utf-8") != c.text:
            c.path.parent.mkdir(parents=True, exist_ok=True)
            c.path.write_text(c.text, encoding="utf-8")
            written.append(c.path)
    return written


def _strip_doc_start(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if line.rstrip() != "---")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m beatflow.deploy.rules", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a copy is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_copies(args.root)
        for path in stale:
            print(
                f"{path} is out of date with {RULES}: run `python -m beatflow.deploy.rules`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path in write_copies(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
