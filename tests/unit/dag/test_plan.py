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


def plan_paths(root: Node) -> dict[str, tuple[tuple[int, bool], ...]]:
    """Each leaf's path from the root: (child index, parent is a Series) per level; iterative,
    so it works on plans of any depth."""
    out: dict[str, tuple[tuple[int, bool], ...]] = {}
    stack: list[tuple[Node, tuple[tuple[int, bool], ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, Leaf):
            out[node.task_id] = path
            continue
        series = isinstance(node, Series)
        stack.extend((c, (*path, (i, series))) for i, c in enumerate(node.children))
    return out


def assert_every_edge_kept(dag: DAG, root: Node) -> None:
    """Every real edge u -> v: the plan's lowest node above both is a Series running u's part
    before v's (so the canvas makes v wait for u)."""
    paths = plan_paths(root)
    assert sorted(paths) == sorted(dag.tasks)
    for v, spec in dag.tasks.items():
        for u in spec.upstream:
            pu, pv = paths[u], paths[v]
            k = next(i for i, (a, b) in enumerate(zip(pu, pv, strict=False)) if a != b)
            assert pu[k][1] and pu[k][0] < pv[k][0], f"{u} -> {v} lost"


def layered(n: int, width: int, seed: int) -> DAG:
    """A DAG that is not series-parallel: each task waits for 2 random tasks of the level above."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(n)]
    edges = [
        (names[p], names[i])
        for i in range(width, n)
        for p in rng.sample(range((i // width - 1) * width, (i // width) * width), 2)
    ]
    return make(edges, names)


def test_a_10000_task_dag_that_is_not_series_parallel_plans_without_losing_an_edge():
    # before: 800 such tasks took 14 s, then RecursionError
    dag = layered(10_000, 100, seed=3)
    plan = build_plan(dag)
    assert not plan.exact
    assert_every_edge_kept(dag, plan.root)
    assert all(b.added >= len(b.false_edges) > 0 for b in plan.barriers)


def test_a_plan_nested_thousands_deep_needs_no_recursion():
    # (((a || b0) ; c0) || b1) ; c1 ...: a series-parallel DAG whose plan nests 1,200 levels
    edges: list[tuple[str, str]] = []
    sinks = ["a"]
    names = ["a"]
    for i in range(600):
        names += [f"b{i}", f"c{i}"]
        edges += [(s, f"c{i}") for s in [*sinks, f"b{i}"]]
        sinks = [f"c{i}"]
    dag = make(edges, names)
    plan = build_plan(dag)
    assert plan.exact
    assert_every_edge_kept(dag, plan.root)
    assert len(list(leaves(plan.root))) == len(names)


def test_big_random_dags_never_lose_a_dependency():
    rng = random.Random(5)
    for _ in range(5):
        n = rng.randint(300, 700)
        names = [f"n{i}" for i in range(n)]
        edges = [
            (names[j], names[i])
            for i in range(1, n)
            for j in rng.sample(range(max(0, i - 30), i), min(i, rng.randint(1, 3)))
        ]
        dag = make(edges, names)
        assert_every_edge_kept(dag, build_plan(dag).root)


def test_big_series_parallel_dags_still_compile_exactly():
    rng = random.Random(9)
    for _ in range(3):
        names = [f"n{i}" for i in range(rng.randint(300, 600))]
        dag = make(random_sp(rng, names), names)
        plan = build_plan(dag)
        assert plan.exact
        assert_every_edge_kept(dag, plan.root)


def test_dags_check_fails_on_a_dag_that_cannot_compile(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from beatflow.cli import main
    from beatflow.dag import plan

    (tmp_path / "small.py").write_text(
        "from beatflow import DAG, task\n\n@task\ndef f():\n    return 1\n\n"
        'with DAG("small"):\n    f()\n'
    )
    (tmp_path / "wide.py").write_text(
        "from beatflow import DAG, task\n\n@task\ndef f():\n    return 1\n\n"
        'with DAG("wide"):\n    for i in range(40):\n        f.override(task_id=f"t{i}")()\n'
    )
    env = {"BEATFLOW_DAGS_FOLDER": str(tmp_path)}
    assert CliRunner().invoke(main, ["dags", "check"], env=env).exit_code == 0
    monkeypatch.setattr(plan, "MAX_PLAN_TASKS", 30)  # "wide" is now too big to plan
    result = CliRunner().invoke(main, ["dags", "check"], env=env)
    assert result.exit_code == 1, result.output
    assert 'DAG "wide"' in result.output and "does not compile" in result.output
    assert 'DAG "small"' not in result.output
