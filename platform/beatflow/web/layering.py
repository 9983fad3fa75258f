"""One level of a layered (Sugiyama) layout drawn left to right: the elements of one container
(the whole graph or one group) with their edges, which form no cycle here.

Layers by longest path, a source pulled next to its first consumer; an edge spanning layers
passes each one through a dummy element (a lane of its own); crossings reduced by barycenter
sweeps, the order with the fewest crossings kept; each layer placed by isotonic regression
towards its neighbours' centres under a minimum separation, so no two elements overlap. Elements
are strings whose first letter says what they are: ``n`` a node, ``g`` a group (a box of a given
size), ``d`` a dummy, ``i``/``o`` a port on the container's left/right border (first/last layer).
Lists all along, never a set's order: the same input gives the same result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

GAP_X, GAP_Y = 44, 14  # between layers; between the boxes of one layer
LANE = 10  # the room of an edge passing a layer (a dummy)
PORT_GAP = 18  # between a container's border (its ports) and its first or last layer
SWEEPS = 12  # barycenter sweeps down and up
ROUNDS = 6  # placement passes down and up
Size = Callable[[str], tuple[float, float]]  # an element's width and height


@dataclass(slots=True)
class Level:
    """A container's elements and edges, then their places (relative to its content's top
    left corner)."""

    items: list[str] = field(default_factory=list)  # its nodes and groups
    edges: list[tuple[str, str]] = field(default_factory=list)  # items and ports
    layer: dict[str, int] = field(default_factory=dict)  # every element, dummies too
    y: dict[str, float] = field(default_factory=dict)  # its centre
    col_x: list[float] = field(default_factory=list)  # each layer's left
    col_w: list[float] = field(default_factory=list)  # and width
    chain: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # edge, dummies between
    width: float = 0.0
    height: float = 0.0


def lay(level: Level, size: Size) -> None:
    """Layers, dummies, order and coordinates of the level's elements."""
    elems = list(dict.fromkeys([*level.items, *(e for pair in level.edges for e in pair)]))
    layer = _layers(elems, level.edges)
    rows: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    up: dict[str, list[str]] = {e: [] for e in elems}
    down: dict[str, list[str]] = {e: [] for e in elems}
    for e in elems:
        rows[layer[e]].append(e)
    for n, (a, b) in enumerate(level.edges):  # long edges through dummies, one per layer
        path = [a, *(f"d:{n}@{i}" for i in range(layer[a] + 1, layer[b])), b]
        for i, d in enumerate(path[1:-1], start=layer[a] + 1):
            rows[i].append(d)
            up[d], down[d] = [], []
        for p, q in zip(path, path[1:], strict=False):
            down[p].append(q)
            up[q].append(p)
        level.chain[(a, b)] = path
    rows = _order(rows, up, down)
    level.layer = {e: i for i, row in enumerate(rows) for e in row}
    level.col_w = [max((size(e)[0] for e in row), default=0.0) for row in rows]
    ports_in = bool(rows and rows[0] and rows[0][0][0] == "i")
    ports_out = bool(rows and rows[-1] and rows[-1][0][0] == "o")
    x = 0.0
    for i, w in enumerate(level.col_w):
        level.col_x.append(x)
        near_port = (i == 0 and ports_in) or (i == len(rows) - 2 and ports_out)
        x += w + (PORT_GAP if near_port else GAP_X)
    level.width = level.col_x[-1] + level.col_w[-1] if rows else 0.0
    centre = _place(rows, up, down, size)
    top = min((centre[e] - size(e)[1] / 2 for e in centre), default=0.0)
    level.y = {e: v - top for e, v in centre.items()}
    level.height = max((level.y[e] + size(e)[1] / 2 for e in centre), default=0.0)


def _layers(elems: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest path from the sources; a source next to its first consumer; in-ports first,
    out-ports last."""
    preds: dict[str, list[str]] = {e: [] for e in elems}
    succs: dict[str, list[str]] = {e: [] for e in elems}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    layer = {e: 0 for e in elems if e[0] == "i"}
    base = 1 if layer else 0
    todo = [e for e in elems if e[0] in "ng"]
    while todo:
        rest: list[str] = []
        for e in todo:
            if all(p in layer for p in preds[e]):
                layer[e] = max((layer[p] + 1 for p in preds[e]), default=base)
            else:
                rest.append(e)
        todo = rest
    for e in sorted(layer, key=lambda e: -layer[e]):
        consumers = [layer[s] for s in succs[e] if s[0] in "ng"]
        if e[0] in "ng" and not preds[e] and consumers:
            layer[e] = max(layer[e], min(consumers) - 1)
    last = max(layer.values(), default=-1) + 1
    return layer | {e: last for e in elems if e[0] == "o"}


def _order(
    rows: list[list[str]], up: Mapping[str, list[str]], down: Mapping[str, list[str]]
) -> list[list[str]]:
    """Barycenter sweeps down and up; the order with the fewest crossings seen."""
    best, fewest = [list(r) for r in rows], _crossings(rows, down)
    for _ in range(SWEEPS):
        if fewest == 0:
            break
        for i in range(1, len(rows)):
            rows[i] = _by_barycenter(rows[i], rows[i - 1], up)
        for i in range(len(rows) - 2, -1, -1):
            rows[i] = _by_barycenter(rows[i], rows[i + 1], down)
        count = _crossings(rows, down)
        if count < fewest:
            best, fewest = [list(r) for r in rows], count
    return best


def _by_barycenter(row: list[str], other: list[str], nbrs: Mapping[str, list[str]]) -> list[str]:
    """``row`` sorted by the mean place of each element's neighbours in ``other``; an element
    with none keeps its place (ties keep the current order)."""
    pos = {e: i for i, e in enumerate(other)}
    keyed: list[tuple[float, int, str]] = []
    free: list[int] = []
    for i, e in enumerate(row):
        ns = [pos[n] for n in nbrs[e]]
        if ns:
            keyed.append((sum(ns) / len(ns), i, e))
        else:
            free.append(i)
    moved = iter(e for _, _, e in sorted(keyed))
    fixed = {i: row[i] for i in free}
    return [fixed[i] if i in fixed else next(moved) for i in range(len(row))]


def _crossings(rows: list[list[str]], down: Mapping[str, list[str]]) -> int:
    total = 0
    for i in range(len(rows) - 1):
        pos = {e: j for j, e in enumerate(rows[i + 1])}
        ends = sorted((j, pos[b]) for j, a in enumerate(rows[i]) for b in down[a])
        tree = [0] * (len(rows[i + 1]) + 1)  # a Fenwick tree of the lower ends seen
        for seen, (_, b) in enumerate(ends):
            k, below = b + 1, 0
            while k > 0:
                below += tree[k]
                k -= k & -k
            total += seen - below  # earlier edges ending below b cross this one
            k = b + 1
            while k < len(tree):
                tree[k] += 1
                k += k & -k
    return total


def _place(
    rows: list[list[str]],
    up: Mapping[str, list[str]],
    down: Mapping[str, list[str]],
    size: Size,
) -> dict[str, float]:
    """Each element's centre: towards the mean of its neighbours', keeping the layer's order
    and separation (isotonic regression by pooling adjacent violators)."""
    gaps: list[list[float]] = []
    for row in rows:
        offs: list[float] = []
        at = 0.0
        for j, e in enumerate(row):
            if j:
                at += _half(row[j - 1], size) + _half(e, size)
            offs.append(at)
        gaps.append(offs)
    y = {
        e: off
        for row, offs in zip(rows, gaps, strict=True)
        for e, off in zip(row, offs, strict=True)
    }
    for r in range(ROUNDS):
        sweep = range(1, len(rows)) if r % 2 == 0 else range(len(rows) - 2, -1, -1)
        nbrs = up if r % 2 == 0 else down
        for i in sweep:
            want = [sum(y[n] for n in nbrs[e]) / len(nbrs[e]) if nbrs[e] else y[e] for e in rows[i]]
            for e, v in zip(rows[i], _pooled(want, gaps[i]), strict=True):
                y[e] = v
    return y


def _half(e: str, size: Size) -> float:
    return size(e)[1] / 2 + (GAP_Y / 2 if e[0] in "ng" else LANE / 2)


def _pooled(want: list[float], offs: list[float]) -> list[float]:
    """Places closest to ``want`` (least squares) with ``y[j+1] - y[j] >= offs[j+1] - offs[j]``."""
    blocks: list[list[float]] = []  # [sum, count]
    for w, o in zip(want, offs, strict=True):
        blocks.append([w - o, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    flat = [s / c for s, c in blocks for _ in range(int(c))]
    return [q + o for q, o in zip(flat, offs, strict=True)]
