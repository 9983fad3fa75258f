"""A DAG drawn as SVG on the server: tasks in columns by depth (longest path from a root), edges
as curves, each task coloured by its state in one run when a run is given. Task groups are boxes
around their tasks; a collapsed group is one node (its tasks' worst state), and each group's
label links to the page with that group toggled (``toggle(group_id)`` gives the URL)."""

from __future__ import annotations

import graphlib
from collections.abc import Callable, Collection, Mapping
from html import escape

from beatflow.dag import groups
from beatflow.dag.model import DAG
from beatflow.dag.render import levels

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 30, 60, 16, 10
GROUP_GAP_Y, GROUP_PAD = 40, 8  # room for a group's label above its tasks
GROUP_PREFIX = "group:"
# a collapsed group shows the first of these its tasks are in
_WORST = ("failed", "upstream_failed", "running", "up_for_retry", "queued", "cancelled",
          "skipped", "success")  # fmt: skip


def visible_nodes(dag: DAG, collapsed: Collection[str]) -> dict[str, str]:
    """task_id -> the node that shows it: itself, or ``group:<id>`` of its outermost collapsed
    group."""
    owner = groups.group_of(dag)
    out = {}
    for tid in dag.tasks:
        shown = tid
        for gid in groups.ancestry(dag, owner.get(tid)):
            if gid in collapsed:
                shown = GROUP_PREFIX + gid
                break
        out[tid] = shown
    return out


def view_graph(
    dag: DAG, collapsed: Collection[str]
) -> tuple[list[str], dict[str, dict[str, bool]]]:
    """The nodes in definition order and, per node, its upstream nodes (True: a data edge)."""
    node_of = visible_nodes(dag, collapsed)
    nodes = list(dict.fromkeys(node_of.values()))
    ups: dict[str, dict[str, bool]] = {n: {} for n in nodes}
    for tid, spec in dag.tasks.items():
        for up in spec.upstream:
            a, b = node_of[up], node_of[tid]
            if a != b:
                ups[b][a] = ups[b].get(a, False) or up in spec.data_upstream
    return nodes, ups


def _depths(dag: DAG, nodes: list[str], ups: Mapping[str, Mapping[str, bool]]) -> dict[str, int]:
    try:
        order = list(graphlib.TopologicalSorter({n: set(ups[n]) for n in nodes}).static_order())
    except graphlib.CycleError:  # a collapsed group both before and after a task: by its tasks
        full = levels(dag)
        node_of = visible_nodes(dag, {n[len(GROUP_PREFIX) :] for n in nodes})
        out: dict[str, int] = {}
        for tid, node in node_of.items():
            out[node] = min(out.get(node, full[tid]), full[tid])
        return out
    depth: dict[str, int] = {}
    for n in order:
        depth[n] = 1 + max((depth[u] for u in ups[n]), default=-1)
    return depth


def layout(dag: DAG, collapsed: Collection[str] = ()) -> dict[str, tuple[int, int]]:
    """Top-left corner of each node's box (tasks, and collapsed groups as ``group:<id>``)."""
    nodes, ups = view_graph(dag, collapsed)
    depth = _depths(dag, nodes, ups)
    owner = groups.group_of(dag)
    # tasks of one group next to each other in a column: sort by the group's place
    rank = {gid: i for i, gid in enumerate(dag.groups)}

    def key(n: str) -> tuple[int, tuple[int, ...], int]:
        gid = n[len(GROUP_PREFIX) :] if n.startswith(GROUP_PREFIX) else owner.get(n)
        path = tuple(rank[g] for g in groups.ancestry(dag, gid)) if gid else ()
        return depth[n], path, nodes.index(n)

    gap = GROUP_GAP_Y if dag.groups else GAP_Y
    rows: dict[int, int] = {}
    out: dict[str, tuple[int, int]] = {}
    top = PAD + (GROUP_GAP_Y - GAP_Y if dag.groups else 0)
    left = PAD + (GROUP_PAD + 12 if dag.groups else 0)  # room for the outermost group's box
    for n in sorted(nodes, key=key):
        col = depth[n]
        row = rows.get(col, 0)
        rows[col] = row + 1
        out[n] = (left + col * (BOX_W + GAP_X), top + row * (BOX_H + gap))
    return out


def _state_of_group(dag: DAG, gid: str, states: Mapping[str, str]) -> str:
    present = {states.get(t, "none") for t in groups.members(dag, gid)}
    return next((s for s in _WORST if s in present), "none")


def _group_boxes(
    dag: DAG, pos: Mapping[str, tuple[int, int]], collapsed: Collection[str]
) -> list[tuple[str, int, int, int, int]]:
    """(group id, x, y, width, height) of each expanded group with something shown."""
    node_of = visible_nodes(dag, collapsed)
    boxes = []
    for gid in dag.groups:
        if any(g in collapsed for g in groups.ancestry(dag, gid)):
            continue
        shown = {node_of[t] for t in groups.members(dag, gid)}
        if not shown:
            continue
        nest = len(groups.ancestry(dag, gid))
        inner = max(0, 4 - nest) * 3  # an outer group's box a little larger than its children
        xs = [pos[n][0] for n in shown]
        ys = [pos[n][1] for n in shown]
        x, y = min(xs) - GROUP_PAD - inner, min(ys) - 22 - inner
        boxes.append((gid, x, y, max(xs) + BOX_W + GROUP_PAD + inner - x,
                      max(ys) + BOX_H + GROUP_PAD + inner - y))  # fmt: skip
    return boxes


def render_svg(
    dag: DAG,
    states: Mapping[str, str] | None = None,
    links: Mapping[str, str] | None = None,
    *,
    collapsed: Collection[str] = (),
    toggle: Callable[[str], str] | None = None,
) -> str:
    """The SVG text (inline in a page); ``states`` task_id -> state, ``links`` task_id -> URL,
    ``collapsed`` the groups drawn as one node, ``toggle(group_id)`` the URL that flips one."""
    states = states or {}
    collapsed = set(collapsed) & set(dag.groups)
    pos = layout(dag, collapsed)
    _, ups = view_graph(dag, collapsed)
    width = max((x for x, _ in pos.values()), default=0) + BOX_W + PAD + GROUP_PAD * 3
    height = max((y for _, y in pos.values()), default=0) + BOX_H + PAD + GROUP_PAD * 3
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="graph of DAG {escape(dag.dag_id)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'class="arrow"/></marker></defs>',
    ]
    for gid, x, y, w, h in _group_boxes(dag, pos, collapsed):
        spec = dag.groups[gid]
        label = f"▾ {spec.label}"
        text = f'<text x="{x + 8}" y="{y + 15}">{escape(label)}</text>'
        if toggle is not None:
            text = f'<a href="{escape(toggle(gid))}" class="group-toggle">{text}</a>'
        parts.append(
            f'<g class="group" data-group="{escape(gid)}"><title>{escape(gid)}'
            f"{': ' + escape(spec.tooltip) if spec.tooltip else ''} (click to collapse)</title>"
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8"/>{text}</g>'
        )
    for node, node_ups in ups.items():
        x2, y2 = pos[node]
        for up, data in sorted(node_ups.items()):
            x1, y1 = pos[up]
            sx, sy, ex, ey = x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2
            mid = (sx + ex) / 2
            dashed = "" if data else ' stroke-dasharray="4 3"'
            parts.append(
                f'<path class="edge" d="M {sx} {sy} C {mid} {sy}, {mid} {ey}, {ex} {ey}"'
                f'{dashed} marker-end="url(#arrow)"/>'
            )
    for node, (x, y) in pos.items():
        parts.append(_node(dag, node, x, y, states, links or {}, toggle))
    parts.append("</svg>")
    return "".join(parts)


def _node(
    dag: DAG,
    node: str,
    x: int,
    y: int,
    states: Mapping[str, str],
    links: Mapping[str, str],
    toggle: Callable[[str], str] | None,
) -> str:
    if node.startswith(GROUP_PREFIX):
        gid = node[len(GROUP_PREFIX) :]
        state = _state_of_group(dag, gid, states)
        count = len(groups.members(dag, gid))
        text, title = f"▸ {dag.groups[gid].label} ({count})", f"group {gid}: {state}"
        attrs, link = (
            f'class="node group-node state-{escape(state)}" data-group="{escape(gid)}"',
            (toggle(gid) if toggle else None),
        )
    else:
        state = states.get(node, "none")
        short = node.rsplit(".", 1)[-1] if node in groups.group_of(dag) else node
        text = short + (" [map]" if dag.tasks[node].map_over else "")
        title, link = f"{node}: {state}", links.get(node)
        attrs = f'class="node state-{escape(state)}" data-task="{escape(node)}"'
    label = text if len(text) <= 22 else text[:21] + "…"
    out = (
        f"<g {attrs}><title>{escape(title)}</title>"
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="5"/>'
        f'<text x="{x + 8}" y="{y + 19}">{escape(label)}</text></g>'
    )
    return f'<a href="{escape(link)}">{out}</a>' if link else out
