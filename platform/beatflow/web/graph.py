"""A DAG drawn as SVG on the server, laid out in layers from left to right, or from top to bottom
for a narrow screen (graph_layout: a Sugiyama layout whose edges never run under a node), each
task coloured by its state in one run when a run is given. A page gets both (``render_svgs``);
its CSS shows one by the width of the graph's box. Task groups are boxes around their tasks and
nothing else; a collapsed group is one node (its tasks' worst state), and each group's label
links to the page with that group toggled (``toggle(group_id)`` gives the URL). A task whose state
an operator's mark of its run overrules (``marked``) keeps its colour, with an outline, a flag and
the mark in its tooltip. The same DAG gives the same SVG."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from beatflow.dag import groups
from beatflow.dag.model import DAG
from beatflow.web.graph_layout import Box, Direction, Layout, layered

GROUP_PREFIX = "group:"
# a collapsed group shows the first of these its tasks are in ("none": one has not run yet, so
# the group is not done)
_WORST = ("failed", "upstream_failed", "running", "up_for_retry", "up_for_reschedule", "queued",
          "cleared", "none", "cancelled", "skipped", "success")  # fmt: skip


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


def _state_of_group(dag: DAG, gid: str, states: Mapping[str, str]) -> str:
    present = {states.get(t, "none") for t in groups.members(dag, gid)}
    return next((s for s in _WORST if s in present), "none")


def render_svg(
    dag: DAG,
    states: Mapping[str, str] | None = None,
    links: Mapping[str, str] | None = None,
    *,
    collapsed: Collection[str] = (),
    toggle: Callable[[str], str] | None = None,
    direction: Direction = "LR",
    marked: Mapping[str, str] | None = None,
) -> str:
    """The SVG text (inline in a page); ``states`` task_id -> state, ``links`` task_id -> URL,
    ``collapsed`` the groups drawn as one node, ``toggle(group_id)`` the URL that flips one,
    ``direction`` where the layers go (its class: ``graph lr`` or ``graph tb``), ``marked`` task_id
    -> the operator's mark that overrules its state. Its size is its natural one; the page's CSS
    scales it down to the width of its box."""
    states = states or {}
    collapsed = set(collapsed) & set(dag.groups)
    lay = layout(dag, collapsed, direction)
    _, ups = view_graph(dag, collapsed)
    width, height = _n(lay.width), _n(lay.height)
    arrow = f"arrow-{direction.lower()}"  # one id per orientation: both may be in a page
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph {direction.lower()}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="graph of DAG {escape(dag.dag_id)}">',
        f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'class="arrow"/></marker></defs>',
    ]
    for route in lay.routes:
        dashed = "" if ups[route.dst][route.src] else ' stroke-dasharray="4 3"'
        marker = "marker-start" if route.reversed else "marker-end"
        parts.append(
            f'<path class="edge" data-edge="{escape(route.src)} {escape(route.dst)}" '
            f'd="{_path(route.points, direction)}"{dashed} {marker}="url(#{arrow})"/>'
        )
    # groups over the edges (their box is not filled): top to bottom, an edge into a group
    # crosses its label's row, and the label's outline keeps it readable
    for gid, box in lay.groups.items():
        spec = dag.groups[gid]
        text = f'<text x="{_n(box.x + 8)}" y="{_n(box.y + 17)}">{escape("▾ " + spec.label)}</text>'
        if toggle is not None:
            text = f'<a href="{escape(toggle(gid))}" class="group-toggle">{text}</a>'
        parts.append(
            f'<g class="group" data-group="{escape(gid)}"><title>{escape(gid)}'
            f"{': ' + escape(spec.tooltip) if spec.tooltip else ''} (click to collapse)</title>"
            f'<rect x="{_n(box.x)}" y="{_n(box.y)}" width="{_n(box.w)}" height="{_n(box.h)}" '
            f'rx="8"/>{text}</g>'
        )
    for node, box in lay.nodes.items():
        parts.append(_node(dag, node, box, states, links or {}, toggle, marked or {}))
    parts.append("</svg>")
    return "".join(parts)


def render_svgs(
    dag: DAG,
    states: Mapping[str, str] | None = None,
    links: Mapping[str, str] | None = None,
    *,
    collapsed: Collection[str] = (),
    toggle: Callable[[str], str] | None = None,
    marked: Mapping[str, str] | None = None,
) -> str:
    """Both orientations of the graph, left to right first; the page's CSS shows one (top to
    bottom in a narrow box, where the other would be scaled down past reading)."""
    return "".join(
        render_svg(
            dag, states, links, collapsed=collapsed, toggle=toggle, direction=d, marked=marked
        )
        for d in ("LR", "TB")
    )


def layout(dag: DAG, collapsed: Collection[str] = (), direction: Direction = "LR") -> Layout:
    """The layered layout of the DAG's graph with ``collapsed`` groups as one node each."""
    nodes, ups = view_graph(dag, collapsed)
    owner = groups.group_of(dag)
    parent = {
        n: dag.groups[n[len(GROUP_PREFIX) :]].parent if n.startswith(GROUP_PREFIX) else owner.get(n)
        for n in nodes
    }
    return layered(
        nodes,
        [(up, n) for n in nodes for up in sorted(ups[n])],  # sorted: upstream is a set
        parent,
        {gid: spec.parent for gid, spec in dag.groups.items()},
        {gid: 7.5 * len(spec.label) + 40 for gid, spec in dag.groups.items()},
        direction,
    )


def group_states(dag: DAG, states: Mapping[str, str]) -> dict[str, str]:
    """Each group's state as a collapsed group shows it (for the run page's poll)."""
    return {gid: _state_of_group(dag, gid, states) for gid in dag.groups}


def toggler(path: str, anchor: str, collapsed: Collection[str]) -> Callable[[str], str]:
    """``toggle(group_id)``: the URL of the page at ``path`` with that group flipped."""

    def url(group_id: str) -> str:
        return collapsed_url(path, anchor, set(collapsed) ^ {group_id})

    return url


def collapsed_url(path: str, anchor: str, collapsed: Collection[str]) -> str:
    query = f"?{urlencode({'collapsed': ','.join(sorted(collapsed))})}" if collapsed else ""
    return f"{path}{query}#{anchor}"


def group_controls(dag: DAG, collapsed: Collection[str], path: str, anchor: str) -> dict[str, Any]:
    """What a page's "collapse all" / "expand all" link needs."""
    return {
        "all": ",".join(dag.groups),
        "any_collapsed": bool(collapsed),
        "expand_url": collapsed_url(path, anchor, ()),
        "collapse_url": collapsed_url(path, anchor, dag.groups),
    }


def parse_collapsed(dag: DAG, text: str) -> set[str]:
    """The ``?collapsed=`` list of a page: the DAG's groups named in it (others ignored)."""
    return {g for g in text.split(",") if g in dag.groups}


def _n(value: float) -> str:
    """A coordinate as the SVG writes it: one decimal at most."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _path(points: Sequence[tuple[float, float]], direction: Direction = "LR") -> str:
    """Straight along a layer, an S-curve across the gap between two layers (it stays inside the
    gap: between its ends' x and y), leaving and arriving in the direction of the layers."""
    (x0, y0), *rest = points
    d = [f"M {_n(x0)} {_n(y0)}"]
    for x, y in rest:
        if y == y0 or x == x0:
            d.append(f"L {_n(x)} {_n(y)}")
        elif direction == "TB":
            mid = _n((y0 + y) / 2)
            d.append(f"C {_n(x0)} {mid}, {_n(x)} {mid}, {_n(x)} {_n(y)}")
        else:
            mid = _n((x0 + x) / 2)
            d.append(f"C {mid} {_n(y0)}, {mid} {_n(y)}, {_n(x)} {_n(y)}")
        x0, y0 = x, y
    return " ".join(d)


def _node(
    dag: DAG,
    node: str,
    box: Box,
    states: Mapping[str, str],
    links: Mapping[str, str],
    toggle: Callable[[str], str] | None,
    marked: Mapping[str, str],
) -> str:
    if node.startswith(GROUP_PREFIX):
        gid = node[len(GROUP_PREFIX) :]
        state = _state_of_group(dag, gid, states)
        members = groups.members(dag, gid)
        text, title = f"▸ {dag.groups[gid].label} ({len(members)})", f"group {gid}: {state}"
        mark = next((marked[t] for t in members if t in marked), None)
        kind, data, link = (
            "group-node ",
            f'data-group="{escape(gid)}"',
            toggle(gid) if toggle else None,
        )
    else:
        state = states.get(node, "none")
        short = node.rsplit(".", 1)[-1] if node in groups.group_of(dag) else node
        text = short + (" [map]" if dag.tasks[node].map_over else "")
        title, link, mark = f"{node}: {state}", links.get(node), marked.get(node)
        kind, data = "", f'data-task="{escape(node)}"'
    room, flag = 21, ""
    if mark is not None:  # the flag takes the end of the box
        room, kind, title = 18, kind + "overruled ", f"{title} ({mark})"
        flag = f'<text class="flag" x="{_n(box.x + box.w - 8)}" y="{_n(box.y + 19)}">⚑</text>'
    label = text if len(text) <= room else text[: room - 1] + "…"
    out = (
        f'<g class="node {kind}state-{escape(state)}" {data}><title>{escape(title)}</title>'
        f'<rect x="{_n(box.x)}" y="{_n(box.y)}" width="{_n(box.w)}" height="{_n(box.h)}" rx="5"/>'
        f'<text x="{_n(box.x + 8)}" y="{_n(box.y + 19)}">{escape(label)}</text>{flag}</g>'
    )
    return f'<a href="{escape(link)}">{out}</a>' if link else out
