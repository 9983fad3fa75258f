"""Drawing a DAG for people: a text view (tasks by level, the canvas plan, added barriers),
Mermaid and Graphviz DOT. Pure: no Celery."""

from __future__ import annotations

from typing import Any

from beatflow.dag import groups
from beatflow.dag.assets import schedule_text
from beatflow.dag.model import DAG
from beatflow.dag.plan import Leaf, Node, Parallel, Plan, build_plan


def levels(dag: DAG) -> dict[str, int]:
    """Longest-path depth of each task (roots are 0)."""
    depth: dict[str, int] = {}
    for tid in dag.topological_order():
        ups = dag.tasks[tid].upstream
        depth[tid] = 1 + max((depth[u] for u in ups), default=-1)
    return depth


def _plan_text(node: Node, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(node, Leaf):
        return [f"{pad}- {node.task_id}"]
    label = "parallel (group)" if isinstance(node, Parallel) else "series (chain)"
    out = [f"{pad}{label}:"]
    for child in node.children:
        out.extend(_plan_text(child, indent + 1))
    return out


def plan_dict(node: Node) -> Any:
    if isinstance(node, Leaf):
        return node.task_id
    kind = "group" if isinstance(node, Parallel) else "chain"
    return {kind: [plan_dict(c) for c in node.children]}


def render_text(dag: DAG, plan: Plan | None = None) -> str:
    plan = plan or build_plan(dag)
    depth = levels(dag)
    lines = [f"DAG {dag.dag_id}" + (f": {dag.description}" if dag.description else "")]
    schedule = schedule_text(dag.schedule, dag.asset_schedule) or "none (manual)"
    lines.append(f"  schedule: {schedule}")
    if dag.file:
        lines.append(f"  defined at: {dag.file}:{dag.line}")
    lines.append("")
    lines.append("tasks (by level):")
    for tid in sorted(dag.tasks, key=lambda t: (depth[t], list(dag.tasks).index(t))):
        spec = dag.tasks[tid]
        ups = sorted(spec.upstream)
        extra = []
        if spec.map_over:
            extra.append(f"mapped over {spec.map_over}")
        if spec.control:
            extra.append(spec.control.replace("_", "-"))
        if spec.trigger_rule != "all_success":
            extra.append(f"trigger_rule={spec.trigger_rule}")
        if spec.retry.retries:
            extra.append(f"retries={spec.retry.retries}")
        arrow = f" <- {', '.join(ups)}" if ups else ""
        note = f"  [{'; '.join(extra)}]" if extra else ""
        lines.append(f"  {'  ' * depth[tid]}{tid}{arrow}{note}")
    lines.append("")
    lines.append("canvas plan:" + ("" if plan.exact else "  (not series-parallel: barriers added)"))
    lines.extend("  " + line for line in _plan_text(plan.root))
    for barrier in plan.barriers:
        waits = ", ".join(f"{b} waits for {a}" for a, b in barrier.false_edges)
        lines.append(
            f"  barrier: {{{', '.join(barrier.after)}}} start after all of "
            f"{{{', '.join(barrier.before)}}}; added waits not in the DAG: {waits}"
        )
    return "\n".join(lines)


def render_mermaid(dag: DAG) -> str:
    lines = ["flowchart LR"]
    open_groups = 0  # a task group is a subgraph around its tasks
    for kind, ident, depth in groups.tree_order(dag, dag.tasks):
        while open_groups > depth:
            open_groups -= 1
            lines.append(f"{'    ' * (open_groups + 1)}end")
        pad = "    " * (depth + 1)
        if kind == "group":
            lines.append(f'{pad}subgraph {_ident("group." + ident)}["{ident}"]')
            open_groups += 1
        else:
            lines.append(f'{pad}{_ident(ident)}["{ident}"]')
    while open_groups:
        open_groups -= 1
        lines.append(f"{'    ' * (open_groups + 1)}end")
    for tid, spec in dag.tasks.items():
        for up in sorted(spec.upstream):
            arrow = "-->" if up in spec.data_upstream else "-.->"
            lines.append(f"    {_ident(up)} {arrow} {_ident(tid)}")
    return "\n".join(lines)


def render_dot(dag: DAG) -> str:
    lines = [f'digraph "{dag.dag_id}" {{', "    rankdir=LR;", "    node [shape=box];"]
    for tid in dag.tasks:
        lines.append(f'    "{tid}";')
    for tid, spec in dag.tasks.items():
        for up in sorted(spec.upstream):
            style = "" if up in spec.data_upstream else " [style=dashed]"
            lines.append(f'    "{up}" -> "{tid}"{style};')
    lines.append("}")
    return "\n".join(lines)


def _ident(task_id: str) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in task_id)
