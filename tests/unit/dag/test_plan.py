"""Series-parallel decomposition: exact for SP DAGs, never violates a dependency otherwise,
and says where it added a barrier."""

from __future__ import annotations

import random

from beatflow.dag.model import DAG, TaskSpec
from beatflow.dag.plan import Leaf, Node, Parallel, Series, build_plan, leaves


def make(edges: list[tuple[str, str]], nodes: list[str] | None = None) -> DAG:
    names = nodes or sorted({n for e in edges for n in e})
    dag = DAG("d")
    for n in names:
        dag.add_task(TaskSpec(task_id=n, fn=lambda: None))
    for u, v in edges:
        dag.tasks[v].order_upstream.add(u)
    return dag


def implied_before(node: Node) -> dict[str, set[str]]:
    """For each task, the tasks the canvas makes it wait for."""
    out: dict[str, set[str]] = {}

    def walk(n: Node, before: set[str]) -> None:
        if isinstance(n, Leaf):
            out[n.task_id] = set(before)
        elif isinstance(n, Parallel):
            for c in n.children:
                walk(c, before)
        else:
            acc = set(before)
            for c in n.children:
                walk(c, acc)
                acc |= set(leaves(c))

    walk(node, set())
    return out


def ancestors(dag: DAG) -> dict[str, set[str]]:
    anc: dict[str, set[str]] = {}
    for t in dag.topological_order():
        anc[t] = set()
        for u in dag.tasks[t].upstream:
            anc[t] |= {u} | anc[u]
    return anc


def test_a_chain_compiles_to_one_series():
    plan = build_plan(make([("a", "b"), ("b", "c")]))
    assert plan.root == Series((Leaf("a"), Leaf("b"), Leaf("c")))
    assert plan.exact


def test_fan_out_fan_in_compiles_to_series_of_parallel():
    plan = build_plan(make([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]))
    assert plan.root == Series((Leaf("a"), Parallel((Leaf("b"), Leaf("c"))), Leaf("d")))
    assert plan.exact


def test_independent_branches_run_in_parallel():
    plan = build_plan(make([("a", "b"), ("c", "d")]))
    assert plan.root == Parallel((Series((Leaf("a"), Leaf("b"))), Series((Leaf("c"), Leaf("d")))))


def test_the_n_shape_gets_one_barrier_with_one_added_wait():
    plan = build_plan(make([("a", "c"), ("b", "c"), ("b", "d")]))
    assert len(plan.barriers) == 1
    assert plan.barriers[0].false_edges == (("a", "d"),)
    before = implied_before(plan.root)
    assert {"a", "b"} <= before["c"] and "b" in before["d"]


def random_sp(rng: random.Random, names: list[str]) -> list[tuple[str, str]]:
    """Edges of a random series-parallel DAG over ``names``."""

    def build(ns: list[str]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
        if len(ns) == 1:
            return [], ns, ns
        k = rng.randint(1, len(ns) - 1)
        e1, s1, t1 = build(ns[:k])
        e2, s2, t2 = build(ns[k:])
        if rng.random() < 0.5:  # series: every sink of the first feeds every source of the second
            return e1 + e2 + [(u, v) for u in t1 for v in s2], s1, t2
        return e1 + e2, s1 + s2, t1 + t2

    return build(names)[0]


def test_random_series_parallel_dags_compile_exactly():
    rng = random.Random(7)
    for trial in range(200):
        names = [f"n{i}" for i in range(rng.randint(1, 14))]
        dag = make(random_sp(rng, names), names)
        plan = build_plan(dag)
        assert plan.exact, f"trial {trial}"
        assert implied_before(plan.root) == ancestors(dag), f"trial {trial}"


def test_random_dags_never_lose_a_dependency_and_report_every_added_wait():
    rng = random.Random(11)
    for trial in range(300):
        names = [f"n{i}" for i in range(rng.randint(2, 12))]
        edges = [
            (names[i], names[j])
            for i in range(len(names))
            for j in range(i + 1, len(names))
            if rng.random() < 0.3
        ]
        dag = make(edges, names)
        plan = build_plan(dag)
        before, anc = implied_before(plan.root), ancestors(dag)
        for t in names:
            assert anc[t] <= before[t], f"trial {trial}: {t} lost a dependency"
        added = {(a, b) for t in names for a in before[t] - anc[t] for b in [t]}
        reported = {e for bar in plan.barriers for e in bar.false_edges}
        assert added <= reported, f"trial {trial}: unreported waits {added - reported}"
        assert sorted(leaves(plan.root)) == sorted(names)


def test_wide_levels_are_nested_so_no_level_exceeds_the_fanout():
    names = ["src", *[f"m{i}" for i in range(1000)], "sink"]
    edges = [("src", f"m{i}") for i in range(1000)] + [(f"m{i}", "sink") for i in range(1000)]
    plan = build_plan(make(edges, names), fanout=32)

    def widest(n: Node) -> int:
        if isinstance(n, Leaf):
            return 0
        return max(len(n.children), *(widest(c) for c in n.children))

    assert widest(plan.root) <= 32
    assert implied_before(plan.root) == ancestors(make(edges, names))
