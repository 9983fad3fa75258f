"""Series-parallel decomposition of a DAG into a plan tree (Series, Parallel, Leaf). Exact for
series-parallel DAGs; for any other DAG it adds as few barriers as it can find (each one listed
with the false dependencies it adds) and never drops a real dependency. Pure: no Celery."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from beatflow.dag.model import DAG


@dataclass(frozen=True, slots=True)
class Leaf:
    task_id: str


@dataclass(frozen=True, slots=True)
class Series:
    children: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Parallel:
    children: tuple[Node, ...]


Node = Leaf | Series | Parallel


@dataclass(frozen=True, slots=True)
class Barrier:
    """A point where the plan waits for more than the DAG asks: ``after`` tasks wait for every
    ``before`` task; ``false_edges`` are the waits the DAG does not have."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    false_edges: tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Plan:
    root: Node
    barriers: list[Barrier] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.barriers


def size(node: Node) -> int:
    """Number of leaves under ``node``."""
    if isinstance(node, Leaf):
        return 1
    return sum(size(c) for c in node.children)


def leaves(node: Node) -> Iterator[str]:
    if isinstance(node, Leaf):
        yield node.task_id
    else:
        for child in node.children:
            yield from leaves(child)


def at_path(root: Node, path: str) -> Node:
    """The node at ``path`` ("" = root, "0.2" = third child of the first child)."""
    node = root
    for part in filter(None, path.split(".")):
        if isinstance(node, Leaf):
            raise KeyError(path)
        node = node.children[int(part)]
    return node


def build_plan(dag: DAG, *, fanout: int = 64) -> Plan:
    """Decompose ``dag``; then nest any Series or Parallel wider than ``fanout`` so that no
    canvas level (and so no Celery message) holds more than ``fanout`` members."""
    plan = _build(dag)
    plan.root = _chunk(plan.root, fanout)
    return plan


def _chunk(node: Node, fanout: int) -> Node:
    if isinstance(node, Leaf):
        return node
    kind = type(node)
    children = [_chunk(c, fanout) for c in node.children]
    while len(children) > fanout:
        children = [
            kind(tuple(children[i : i + fanout]))
            if len(children[i : i + fanout]) > 1
            else children[i]
            for i in range(0, len(children), fanout)
        ]
    return kind(tuple(children))


def _build(dag: DAG) -> Plan:
    order = dag.topological_order()
    index = {tid: i for i, tid in enumerate(order)}
    up = dag.upstream_map()
    # desc[i]: bitset of every transitive descendant of order[i]
    desc = [0] * len(order)
    down = dag.downstream_map()
    for tid in reversed(order):
        bits = 0
        for child in down[tid]:
            j = index[child]
            bits |= (1 << j) | desc[j]
        desc[index[tid]] = bits
    neighbours = {tid: up[tid] | down[tid] for tid in order}
    plan = Plan(root=Leaf(order[0]) if order else Series(()))
    if order:
        plan.root = _decompose(list(range(len(order))), order, desc, neighbours, index, plan)
    return plan


def _components(
    members: list[int], order: list[str], neighbours: dict[str, set[str]], index: dict[str, int]
) -> list[list[int]]:
    inside = set(members)
    seen: set[int] = set()
    comps: list[list[int]] = []
    for start in members:
        if start in seen:
            continue
        comp, stack = [], [start]
        seen.add(start)
        while stack:
            i = stack.pop()
            comp.append(i)
            for n in neighbours[order[i]]:
                j = index[n]
                if j in inside and j not in seen:
                    seen.add(j)
                    stack.append(j)
        comps.append(sorted(comp))
    return comps


def _decompose(
    members: list[int],
    order: list[str],
    desc: list[int],
    neighbours: dict[str, set[str]],
    index: dict[str, int],
    plan: Plan,
) -> Node:
    if len(members) == 1:
        return Leaf(order[members[0]])
    comps = _components(members, order, neighbours, index)
    if len(comps) > 1:
        return Parallel(tuple(_decompose(c, order, desc, neighbours, index, plan) for c in comps))
    # One connected component (members sorted in topological order): find exact series cuts.
    mask_after = [0] * (len(members) + 1)
    for k in range(len(members) - 1, -1, -1):
        mask_after[k] = mask_after[k + 1] | (1 << members[k])
    cuts: list[int] = []
    common = -1  # all bits
    for k in range(len(members) - 1):
        common &= desc[members[k]]
        if mask_after[k + 1] & ~common == 0:
            cuts.append(k + 1)
    if not cuts:
        k = _best_barrier(members, desc, mask_after)
        before = [order[i] for i in members[:k]]
        after = [order[i] for i in members[k:]]
        false_edges = tuple(
            (order[a], order[b]) for a in members[:k] for b in members[k:] if not (desc[a] >> b) & 1
        )
        plan.barriers.append(Barrier(tuple(before), tuple(after), false_edges))
        cuts = [k]
    segments, start = [], 0
    for cut in [*cuts, len(members)]:
        segments.append(members[start:cut])
        start = cut
    children: list[Node] = []
    for seg in segments:
        child = _decompose(seg, order, desc, neighbours, index, plan)
        children.extend(child.children if isinstance(child, Series) else (child,))
    return Series(tuple(children))


def _best_barrier(members: list[int], desc: list[int], mask_after: list[int]) -> int:
    """The cut position with the fewest false dependencies (only cuts that keep every real edge
    pointing forward, i.e. prefixes of the topological order)."""
    best_k, best_cost = 1, None
    for k in range(1, len(members)):
        after = mask_after[k]
        cost = sum((after & ~desc[a]).bit_count() for a in members[:k])
        if best_cost is None or cost < best_cost:
            best_k, best_cost = k, cost
    return best_k
