"""A DAG drawn as SVG on the server: tasks in columns by depth (longest path from a root), edges
as curves, each task coloured by its state in one run when a run is given."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from beatflow.dag.model import DAG
from beatflow.dag.render import levels

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 30, 60, 16, 10


def layout(dag: DAG) -> dict[str, tuple[int, int]]:
    """Top-left corner of each task's box."""
    depth = levels(dag)
    rows: dict[int, int] = {}
    out: dict[str, tuple[int, int]] = {}
    order = list(dag.tasks)
    for tid in sorted(dag.tasks, key=lambda t: (depth[t], order.index(t))):
        col = depth[tid]
        row = rows.get(col, 0)
        rows[col] = row + 1
        out[tid] = (PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    return out


def render_svg(
    dag: DAG, states: Mapping[str, str] | None = None, links: Mapping[str, str] | None = None
) -> str:
    """The SVG text (inline in a page); ``states`` task_id -> state, ``links`` task_id -> URL."""
    pos = layout(dag)
    width = max((x for x, _ in pos.values()), default=0) + BOX_W + PAD
    height = max((y for _, y in pos.values()), default=0) + BOX_H + PAD
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="graph of DAG {escape(dag.dag_id)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'class="arrow"/></marker></defs>',
    ]
    for tid, spec in dag.tasks.items():
        x2, y2 = pos[tid]
        for up in sorted(spec.upstream):
            x1, y1 = pos[up]
            sx, sy, ex, ey = x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2
            mid = (sx + ex) / 2
            dashed = "" if up in spec.data_upstream else ' stroke-dasharray="4 3"'
            parts.append(
                f'<path class="edge" d="M {sx} {sy} C {mid} {sy}, {mid} {ey}, {ex} {ey}"'
                f'{dashed} marker-end="url(#arrow)"/>'
            )
    for tid, (x, y) in pos.items():
        state = (states or {}).get(tid, "none")
        label = tid if len(tid) <= 22 else tid[:21] + "…"
        mapped = " [map]" if dag.tasks[tid].map_over else ""
        node = (
            f'<g class="node state-{escape(state)}" data-task="{escape(tid)}">'
            f"<title>{escape(tid)}: {escape(state)}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="5"/>'
            f'<text x="{x + 8}" y="{y + 19}">{escape(label + mapped)}</text></g>'
        )
        link = (links or {}).get(tid)
        if link:
            node = f'<a href="{escape(link)}">{node}</a>'
        parts.append(node)
    parts.append("</svg>")
    return "".join(parts)
