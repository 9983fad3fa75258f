"""Series-parallel decomposition of a DAG into a plan tree (Series, Parallel, Leaf). Exact for
series-parallel DAGs; for any other DAG it adds as few barriers as it can find (each one listed
with the false dependencies it adds) and never drops a real dependency. Pure: no Celery.
No recursion anywhere (an explicit stack), and each split is one sweep of big-int bitset
operations, so 10,000 tasks plan in well under a second."""

from __future__ import annotations

import graphlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from beatflow.dag import graph
from beatflow.dag.model import DAG
from beatflow.errors import DagDefinitionError

MAX_LISTED_WAITS = 1000
# Bigger DAGs are refused at plan time (and by `beatflow dags check`): a worker would hold the
# whole plan in memory for every run; wide data belongs in .map(), which is not planned per item.
MAX_PLAN_TASKS = 100_000
# A connected part that is not series-parallel gets the one barrier that adds the fewest waits
# when it is this small; a bigger one is cut between its levels at once (one barrier per level),
# which keeps planning near-linear where peeling one barrier at a time would be quadratic.
SMALL_COMPONENT = 256


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
    ``before`` task; ``false_edges`` are the waits the DAG does not have (listed up to
    MAX_LISTED_WAITS: a barrier across thousands of tasks can add millions; ``added`` counts
    them all)."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    false_edges: tuple[tuple[str, str], ...]  # the first MAX_LISTED_WAITS of them
    added: int = 0  # how many waits the barrier adds in all


@dataclass(slots=True)
class Plan:
    root: Node
    barriers: list[Barrier] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.barriers


def size(node: Node) -> int:
    """Number of leaves under ``node``."""
    return sum(1 for _ in leaves(node))


def leaves(node: Node) -> Iterator[str]:
    """The task ids under ``node``, left to right (iterative: plans may nest thousands deep)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Leaf):
            yield current.task_id
        else:
            stack.extend(reversed(current.children))


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


def _chunk(root: Node, fanout: int) -> Node:
    """Nest every Series/Parallel wider than ``fanout`` (post-order, with an explicit stack)."""
    done: dict[int, Node] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if isinstance(node, Leaf):
            done[id(node)] = node
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in node.children)
            continue
        kind = type(node)
        children = [done.pop(id(c)) for c in node.children]
        while len(children) > fanout:
            children = [
                kind(tuple(children[i : i + fanout]))
                if len(children[i : i + fanout]) > 1
                else children[i]
                for i in range(0, len(children), fanout)
            ]
        done[id(node)] = kind(tuple(children))
    return done[id(root)]


def _build(dag: DAG) -> Plan:
    if len(dag.tasks) > MAX_PLAN_TASKS:
        raise DagDefinitionError(
            f'DAG "{dag.dag_id}" has {len(dag.tasks):,} tasks, over the {MAX_PLAN_TASKS:,} a '
            "plan may hold; split it into several DAGs or fan out with .map()",
            file=dag.file,
            line=dag.line,
        )
    if not dag.tasks:
        return Plan(root=Series(()))
    # one pass over the specs (TaskSpec.upstream is computed on every access)
    position = {tid: i for i, tid in enumerate(dag.tasks)}
    up_by_pos = [
        [position[u] for u in spec.upstream if u in position] for spec in dag.tasks.values()
    ]
    try:  # ties in definition order, as DAG.topological_order
        order_pos = graph.topological_order(dict(enumerate(up_by_pos)))
    except graphlib.CycleError:  # the DAG was validated acyclic when it was built
        raise DagDefinitionError("the DAG has a cycle; it cannot be planned") from None
    index = [0] * len(order_pos)  # definition position -> topological index
    for i, p in enumerate(order_pos):
        index[p] = i
    names = list(dag.tasks)
    order = [names[p] for p in order_pos]
    ups = [[index[u] for u in up_by_pos[p]] for p in order_pos]
    downs: list[list[int]] = [[] for _ in order]
    for i, us in enumerate(ups):
        for u in us:
            downs[u].append(i)
    plan = Plan(root=Leaf(order[0]))
    plan.root = _decompose(_Graph(order, ups, downs), list(range(len(order))), plan)
    return plan


@dataclass(frozen=True, slots=True)
class _Graph:
    order: list[str]  # task ids in topological order; everything else uses these indices
    ups: list[list[int]]
    downs: list[list[int]]


def _decompose(g: _Graph, members: list[int], plan: Plan) -> Node:
    """Iterative (an explicit stack, no recursion): each frame splits a member set into parallel
    components or series segments; a frame's node is assembled once its children are done."""
    # frames: (kind, parts, results) — a part is a member list (to split) or a finished Node
    root: list[Node] = []
    stack: list[tuple[str, list[list[int]], list[Node], list[Node]]] = []

    def push(members: list[int], out: list[Node]) -> None:
        if len(members) == 1:
            out.append(Leaf(g.order[members[0]]))
            return
        comps = _components(g, members)
        if len(comps) > 1:
            stack.append(("parallel", comps[::-1], [], out))
            return
        cuts = _series_cuts(g, members)
        if not cuts and len(members) <= SMALL_COMPONENT:
            cuts = [_barrier(g, members, plan)]
        elif not cuts:
            # levels have no edge inside: each is a Parallel of leaves, nothing left to split
            ordered, cuts = _level_cuts(g, members, plan)
            levels = [ordered[a:b] for a, b in itertools.pairwise([0, *cuts, len(ordered)])]
            out.append(Series(tuple(_flat_parallel(g, level) for level in levels)))
            return
        parts, start = [], 0
        for cut in [*cuts, len(members)]:
            parts.append(members[start:cut])
            start = cut
        stack.append(("series", parts[::-1], [], out))

    push(members, root)
    while stack:
        kind, todo, done, out = stack[-1]
        if todo:
            push(todo.pop(), done)
            continue
        stack.pop()
        if kind == "parallel":
            out.append(Parallel(tuple(done)))
        else:
            children: list[Node] = []
            for child in done:
                children.extend(child.children if isinstance(child, Series) else (child,))
            out.append(Series(tuple(children)))
    return root[0]


def _flat_parallel(g: _Graph, members: list[int]) -> Node:
    if len(members) == 1:
        return Leaf(g.order[members[0]])
    return Parallel(tuple(Leaf(g.order[v]) for v in members))


def _components(g: _Graph, members: list[int]) -> list[list[int]]:
    """Weakly connected components of the members (edges between members only), each sorted."""
    inside = set(members)
    seen: set[int] = set()
    comps: list[list[int]] = []
    for start in members:
        if start in seen:
            continue
        comp, todo = [start], [start]
        seen.add(start)
        while todo:
            i = todo.pop()
            for nbrs in (g.ups[i], g.downs[i]):
                for j in nbrs:
                    if j not in seen and j in inside:
                        seen.add(j)
                        comp.append(j)
                        todo.append(j)
        comps.append(sorted(comp) if len(comp) > 1 else comp)
        if len(comp) == len(members):
            break
    return comps


def _series_cuts(g: _Graph, members: list[int]) -> list[int]:
    """Positions k (members in topological order) where every member from k on descends from
    every member before k (within the members): the exact series splits.

    One sweep, O(members + their edges), no reachability sets: every member before the cut
    reaches a *last* one (no edge to another member before the cut) and every member after
    it is reached from a *first* one (no edge from another member after the cut), and a path
    from a last member to a first one can only be a direct edge; so the cut is exact iff
    every last member has an edge to every first member (``x == a * b`` below)."""
    m = len(members)
    pos = {v: k for k, v in enumerate(members)}
    ups = [[pos[u] for u in g.ups[v] if u in pos] for v in members]
    downs = [[pos[w] for w in g.downs[v] if w in pos] for v in members]
    in_after = [len(us) for us in ups]  # edges from members after the cut
    is_last = [False] * m
    is_first = [n == 0 for n in in_after]
    a, b, x = 0, sum(is_first), 0
    cuts: list[int] = []
    for k in range(m - 1):  # members[k] moves before the cut
        x -= sum(is_last[u] for u in ups[k])  # k stops being a first member
        is_first[k] = False
        b -= 1
        for u in ups[k]:  # its upstream now has an edge into the part before the cut
            if is_last[u]:
                is_last[u] = False
                a -= 1
                x -= sum(is_first[w] for w in downs[u])
        for w in downs[k]:
            in_after[w] -= 1
            if in_after[w] == 0:
                is_first[w] = True
                b += 1
                x += sum(is_last[u] for u in ups[w])
        is_last[k] = True
        a += 1
        x += sum(is_first[w] for w in downs[k])
        if x == a * b:
            cuts.append(k + 1)
    return cuts


def _local(g: _Graph, members: list[int]) -> tuple[list[list[int]], list[int], list[int]]:
    """The members' edges in member positions, and each member's descendants and ancestors
    among the members as bitsets (only for small parts: m * m bits)."""
    pos = {v: k for k, v in enumerate(members)}
    ups = [[pos[u] for u in g.ups[v] if u in pos] for v in members]
    m = len(members)
    desc, anc = [0] * m, [0] * m
    for k in range(m):
        bits = 0
        for u in ups[k]:
            bits |= (1 << u) | anc[u]
        anc[k] = bits
    for k in range(m - 1, -1, -1):
        for u in ups[k]:
            desc[u] |= (1 << k) | desc[k]
    return ups, desc, anc


def _barrier(g: _Graph, members: list[int], plan: Plan) -> int:
    """Cut at the prefix of the topological order that adds the fewest waits the DAG does not
    have (the first such), and record the barrier. The cost of every cut comes from one sweep:
    moving member s from after the cut to before it removes the pairs (a, s) with a not an
    ancestor of s and adds the pairs (s, b) with b not a descendant of s."""
    _, desc, anc = _local(g, members)
    m = len(members)
    everyone = (1 << m) - 1
    best_k, best_cost = 1, -1
    cost, before = 0, 0
    for k in range(1, m):
        s = k - 1
        cost -= s - (anc[s] & before).bit_count()
        before |= 1 << s
        cost += ((everyone >> k << k) & ~desc[s]).bit_count()
        if best_cost < 0 or cost < best_cost:
            best_k, best_cost = k, cost
    after = everyone >> best_k << best_k
    false_edges: list[tuple[str, str]] = []
    for s in range(best_k):
        missing = after & ~desc[s]
        while missing and len(false_edges) < MAX_LISTED_WAITS:
            low = missing & -missing
            false_edges.append((g.order[members[s]], g.order[members[low.bit_length() - 1]]))
            missing ^= low
    plan.barriers.append(
        Barrier(
            tuple(g.order[i] for i in members[:best_k]),
            tuple(g.order[i] for i in members[best_k:]),
            tuple(false_edges),
            best_cost,
        )
    )
    return best_k


def _level_cuts(g: _Graph, members: list[int], plan: Plan) -> tuple[list[int], list[int]]:
    """A big part that is not series-parallel: order the members by level (longest path from
    the part's sources) and cut between every two levels at once, recording a barrier at each
    cut with the waits it adds between the two levels (a task of one level and one of the next
    are ordered by the DAG only through a direct edge). Returns the new order and the cuts."""
    level: dict[int, int] = {}
    for v in members:  # topological order
        depth = 0
        for u in g.ups[v]:
            if u in level and level[u] >= depth:
                depth = level[u] + 1
        level[v] = depth
    ordered = sorted(members, key=lambda v: (level[v], v))
    cuts = [k for k in range(1, len(ordered)) if level[ordered[k]] != level[ordered[k - 1]]]
    bounds = [0, *cuts, len(ordered)]
    listed = max(1, MAX_LISTED_WAITS // max(1, len(cuts)))
    for n in range(len(cuts)):
        before, after = ordered[bounds[n] : bounds[n + 1]], ordered[bounds[n + 1] : bounds[n + 2]]
        later = set(after)
        edges = {(u, w) for u in before for w in g.downs[u] if w in later}
        missing = list(
            itertools.islice(((u, w) for u in before for w in after if (u, w) not in edges), listed)
        )
        plan.barriers.append(
            Barrier(
                tuple(g.order[v] for v in before),
                tuple(g.order[v] for v in after),
                tuple((g.order[u], g.order[w]) for u, w in missing),
                len(before) * len(after) - len(edges),
            )
        )
    return ordered, cuts
