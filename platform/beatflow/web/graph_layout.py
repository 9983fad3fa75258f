"""The layout of the web UI's DAG graph: a layered (Sugiyama) layout drawn left to right, or top
to bottom (for a narrow screen), with task groups as compound nodes, and each edge's path.

Each level (the whole graph, and each group) is laid out by ``layering``: layers, dummies for
long edges, crossings reduced, places without overlap. Cycles (a collapsed group both before and
after a task) are broken first by reversing the back edges of a depth-first walk; such an edge
is drawn the other way, its arrow at its start. A group is laid out on its own first, with ports
on its left and right borders for the edges that cross it, then placed as one box in its
parent's level, so a group's box holds its members and nothing else. An edge's path goes out of
the groups around its source, across the level holding both ends, and into the groups around
its target; it runs along its lane inside a layer and crosses the gaps between layers, so it
never runs under a box it does not end at. Top to bottom is the same layout with the axes swapped:
laid out left to right with each box's width and height exchanged (and a group's label room at
its left), then turned over its diagonal, so layers become rows and ports sit on a group's top
and bottom borders. Lists all along, never a set's order: the same input gives the same
layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from beatflow.web.layering import Level, lay

NODE_W, NODE_H = 160, 30
PAD, LABEL_H = 10, 26  # inside a group's box; the room of its label above its members
Step = tuple[str | None, str, str]  # (container, from element, to element)
Direction = Literal["LR", "TB"]  # left to right; top to bottom


@dataclass(frozen=True, slots=True)
class Box:
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True, slots=True)
class Route:
    """An edge's path: points joined by lines along a layer (horizontal left to right, vertical
    top to bottom) and lines across the gaps between layers; ``reversed``: laid out from
    ``dst`` to ``src`` (it closed a cycle)."""

    src: str
    dst: str
    points: tuple[tuple[float, float], ...]
    reversed: bool


@dataclass(slots=True)
class Layout:
    width: float
    height: float
    nodes: dict[str, Box]
    groups: dict[str, Box]
    routes: list[Route]


def layered(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str]],
    parent: Mapping[str, str | None] | None = None,
    group_parent: Mapping[str, str | None] | None = None,
    group_min_width: Mapping[str, float] | None = None,
    direction: Direction = "LR",
) -> Layout:
    """Lay out ``nodes`` and ``edges`` (pairs of nodes). ``parent``: a node's innermost group
    (absent or None: none); ``group_parent``: each group's parent group (None: top level);
    ``group_min_width``: room for a group's label; ``direction``: where the layers go."""
    graph = _Compound(nodes, parent or {}, group_parent or {}, direction == "TB")
    paths = graph.connect(edges)
    graph.lay_out(group_min_width or {})
    root = graph.levels[None]
    out = Layout(root.width + 2 * PAD, root.height + 2 * PAD, {}, {}, [])
    graph.place(None, PAD, PAD, out)
    for u, v, rev, steps in paths:
        out.routes.append(Route(u, v, graph.route(steps, out), rev))
    return _turned(out) if graph.turned else out


def _turned(lay: Layout) -> Layout:
    """The layout mirrored over its diagonal: x for y, width for height."""

    def box(b: Box) -> Box:
        return Box(b.y, b.x, b.h, b.w)

    return Layout(
        lay.height,
        lay.width,
        {k: box(b) for k, b in lay.nodes.items()},
        {k: box(b) for k, b in lay.groups.items()},
        [Route(r.src, r.dst, tuple((y, x) for x, y in r.points), r.reversed) for r in lay.routes],
    )


class _Compound:
    """The levels of a graph with groups, and where each element ended up (laid out left to
    right; ``turned``: sizes and a group's label room as the graph turned over its diagonal
    needs them)."""

    def __init__(
        self,
        nodes: Sequence[str],
        parent: Mapping[str, str | None],
        group_parent: Mapping[str, str | None],
        turned: bool = False,
    ) -> None:
        self.turned = turned
        self.node_size = (NODE_H, NODE_W) if turned else (NODE_W, NODE_H)
        self.group_parent = group_parent
        self.chains = {n: _ancestry(parent.get(n), group_parent) for n in nodes}
        self.levels: dict[str | None, Level] = {None: Level()}
        for n in nodes:  # each level's items in the order of their first node
            ch = self.chains[n]
            for depth in range(len(ch) + 1):
                level = self.levels.setdefault(ch[depth - 1] if depth else None, Level())
                if self.item(n, depth) not in level.items:
                    level.items.append(self.item(n, depth))
        self.sizes: dict[str, tuple[float, float]] = {}
        self.points: dict[str, tuple[float, float]] = {}  # dummies and ports: left end
        self.cols: dict[str, tuple[float, float]] = {}  # each element: its layer's left, right

    def item(self, node: str, depth: int) -> str:
        """What stands for ``node`` in the level ``depth`` groups down its chain."""
        ch = self.chains[node]
        return f"g:{ch[depth]}" if depth < len(ch) else f"n:{node}"

    def connect(self, edges: Sequence[tuple[str, str]]) -> list[tuple[str, str, bool, list[Step]]]:
        """Each edge in the innermost level holding both ends (cycles there broken), and its
        steps through the levels, ports added."""
        lifted: list[tuple[str, str, int, str | None, tuple[str, str]]] = []
        for u, v in dict.fromkeys(edges):
            if u == v:
                continue
            cu, cv = self.chains[u], self.chains[v]
            k = 0
            while k < min(len(cu), len(cv)) and cu[k] == cv[k]:
                k += 1
            box, pair = cu[k - 1] if k else None, (self.item(u, k), self.item(v, k))
            if pair not in self.levels[box].edges:
                self.levels[box].edges.append(pair)
            lifted.append((u, v, k, box, pair))
        back = {box: _back_edges(lv.items, lv.edges) for box, lv in self.levels.items()}
        for box, lv in self.levels.items():
            lv.edges = list(dict.fromkeys((b, a) if (a, b) in back[box] else (a, b)
                                          for a, b in lv.edges))  # fmt: skip
        paths: list[tuple[str, str, bool, list[Step]]] = []
        for u, v, k, box, pair in lifted:
            rev = pair in back[box]
            steps = self._steps(*((v, u) if rev else (u, v)), k, box)
            for c, x, y in steps:
                if (x, y) not in self.levels[c].edges:
                    self.levels[c].edges.append((x, y))
            paths.append((u, v, rev, steps))
        return paths

    def _steps(self, s: str, t: str, k: int, box: str | None) -> list[Step]:
        """Out of the groups around ``s`` (right ports), across ``box``, into those of ``t``."""
        steps: list[Step] = []
        for depth in range(len(self.chains[s]), k, -1):
            inner = self.item(s, depth)
            steps.append((self.chains[s][depth - 1], inner, f"o:{inner}"))
        steps.append((box, self.item(s, k), self.item(t, k)))
        for depth in range(k + 1, len(self.chains[t]) + 1):
            inner = self.item(t, depth)
            steps.append((self.chains[t][depth - 1], f"i:{inner}", inner))
        return steps

    def size(self, e: str) -> tuple[float, float]:
        return self.sizes.get(e, self.node_size if e[0] == "n" else (0.0, 0.0))

    def lay_out(self, group_min_width: Mapping[str, float]) -> None:
        """Inner groups first: a group's size is known before its parent's level is laid out."""
        for box in sorted(self.levels, key=lambda b: -len(_ancestry(b, self.group_parent))):
            level = self.levels[box]
            lay(level, self.size)
            if box is None:
                continue
            least = group_min_width.get(box, 0.0)  # its width as drawn
            if self.turned:  # the label's room at the left: above, once turned
                size = (level.width + LABEL_H + PAD, max(level.height + 2 * PAD, least))
            else:
                size = (max(level.width + 2 * PAD, least), level.height + LABEL_H + PAD)
            self.sizes[f"g:{box}"] = size

    def place(self, box: str | None, ox: float, oy: float, out: Layout) -> None:
        """The level's elements at their absolute places, its content's top left at (ox, oy)."""
        level = self.levels[box]
        for e, i in level.layer.items():
            left = ox + level.col_x[i]
            key = e if e[0] in "ng" else _key(box, e)
            self.cols[key] = (left, left + level.col_w[i])
            w, h = self.size(e)
            top = oy + level.y[e] - h / 2
            if e[0] == "n":
                out.nodes[e[2:]] = Box(left, top, w, h)
            elif e[0] == "g":
                out.groups[e[2:]] = Box(left, top, w, h)
                inset = (LABEL_H, PAD) if self.turned else (PAD, LABEL_H)
                self.place(e[2:], left + inset[0], top + inset[1], out)
            else:
                self.points[key] = (left, oy + level.y[e])

    def route(self, steps: list[Step], out: Layout) -> tuple[tuple[float, float], ...]:
        """The points of one edge: out of its source's right side, along each level's chain (the
        right end of a layer, a dummy's lane, the left end of the next layer), into its target."""
        pts: list[tuple[float, float]] = []
        for c, a, b in steps:
            if not pts:  # the first step starts at a node
                box = out.nodes[a[2:]]
                pts.append((box.x + box.w, box.y + box.h / 2))
            elif a[0] == "i":  # into group c: its left border, then the port inside
                x, y = self.points[_key(c, a)]
                pts += [(out.groups[str(c)].x, y), (x, y)]
            pts.append((self.cols[a if a[0] in "ng" else _key(c, a)][1], pts[-1][1]))
            for d in self.levels[c].chain[(a, b)][1:-1]:
                left, y = self.points[_key(c, d)]
                pts += [(left, y), (self.cols[_key(c, d)][1], y)]
            if b[0] == "n":
                box = out.nodes[b[2:]]
                pts.append((box.x, box.y + box.h / 2))
            elif b[0] == "o":  # out of group c: the port, then its right border
                x, y = self.points[_key(c, b)]
                group = out.groups[str(c)]
                pts += [(x, y), (group.x + group.w, y)]
            # b a group: the next step enters it
        final: list[tuple[float, float]] = []
        for p in pts:
            if not final or final[-1] != p:
                final.append(p)
        return tuple(final)


def _key(box: str | None, e: str) -> str:
    """A dummy's or port's name in the whole graph (theirs are per level)."""
    return f"{box or ''}\0{e}"


def _ancestry(group: str | None, group_parent: Mapping[str, str | None]) -> list[str]:
    chain: list[str] = []
    while group is not None:
        chain.append(group)
        group = group_parent.get(group)
    return chain[::-1]


def _back_edges(items: list[str], edges: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges a depth-first walk (in the given order) finds going back: reversed, no cycle."""
    succ: dict[str, list[str]] = {i: [] for i in items}
    for a, b in edges:
        succ[a].append(b)
    state: dict[str, int] = {}  # 1 on the walk's path, 2 done
    back: set[tuple[str, str]] = set()
    for root in items:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(succ[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return back
