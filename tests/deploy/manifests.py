"""Render beatflow's deployment files the way users do (kubectl kustomize, helm template) and
walk the result: the helpers every test in tests/deploy shares."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"
CHART = ROOT / "helm" / "beatflow"
# ../shared/schemas next to the checkout (or next to the folder of worktrees holding it)
SHARED_SCHEMAS = next(
    (p / "shared" / "schemas" for p in ROOT.parents[:2] if (p / "shared" / "schemas").is_dir()),
    ROOT.parent / "shared" / "schemas",
)
KUSTOMIZE_TARGETS = ("k8s/base", "k8s/overlays/dev", "k8s/overlays/prod", "k8s/overlays/rabbitmq")
HELM_VALUE_SETS = ("default", *sorted(p.name for p in (CHART / "ci").glob("*.yaml")))
POD_KINDS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}

Obj = dict[str, Any]


class RenderError(Exception):
    """Raised when kubectl or helm refuses to render; carries the tool's message."""


@dataclass(frozen=True)
class Rendered:
    """The objects one kustomize target or one Helm value set renders to."""

    name: str
    objects: tuple[Obj, ...]

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def named(self, kind: str, name: str) -> Obj:
        for o in self.of_kind(kind):
            if o["metadata"]["name"] == name:
                return o
        raise KeyError(f"{self.name}: no {kind} named {name}")

    def config(self) -> dict[str, str]:
        """The beatflow ConfigMap's data (BEATFLOW_* settings)."""
        maps = [o for o in self.of_kind("ConfigMap") if "BEATFLOW_QUEUES" in o.get("data", {})]
        assert len(maps) == 1, f"{self.name}: expected one beatflow ConfigMap, found {len(maps)}"
        data: dict[str, str] = maps[0]["data"]
        return data


def tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run deploy/tools.sh")
    return str(path)


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/beatflow-helm/cache",
        "HELM_CONFIG_HOME": "/tmp/beatflow-helm/config",
        "HELM_DATA_HOME": "/tmp/beatflow-helm/data",
    }
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    if check and proc.returncode != 0:
        raise RenderError(f"{shlex.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def load_all(text: str) -> tuple[Obj, ...]:
    return tuple(d for d in yaml.safe_load_all(text) if d)


@functools.cache
def render_kustomize(target: str) -> Rendered:
    out = run([tool("kubectl"), "kustomize", str(ROOT / target)]).stdout
    return Rendered(target, load_all(out))


def helm_template_argv(values: Sequence[Path] = (), release: str = "beatflow") -> list[str]:
    argv = [tool("helm"), "template", release, str(CHART), "--namespace", "beatflow"]
    for path in values:
        argv += ["-f", str(path)]
    return argv


@functools.cache
def render_helm(value_set: str) -> Rendered:
    values = () if value_set == "default" else (CHART / "ci" / value_set,)
    out = run(helm_template_argv(values)).stdout
    return Rendered(f"helm:{value_set}", load_all(out))


def all_targets() -> list[str]:
    return [*KUSTOMIZE_TARGETS, *(f"helm:{v}" for v in HELM_VALUE_SETS)]


def render(target: str) -> Rendered:
    if target.startswith("helm:"):
        return render_helm(target.split(":", 1)[1])
    return render_kustomize(target)


def pod_spec(obj: Obj) -> Obj | None:
    path = POD_KINDS.get(obj["kind"])
    if path is None:
        return None
    node = obj
    for key in path:
        node = node[key]
    spec: Obj = node["spec"]
    return spec


def containers(obj: Obj) -> Iterator[Obj]:
    spec = pod_spec(obj)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def component(obj: Obj) -> str:
    labels = obj["metadata"].get("labels", {})
    return str(labels.get("app.kubernetes.io/component", ""))


def command_line(container: Obj) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]
