"""Plan -> Celery canvas: shapes, ids-only messages, bounded message size for big DAGs."""

from __future__ import annotations

import json

from celery import Celery
from celery.canvas import Signature, _chain, _chord, group

from beatflow.dag.compile import FINISH_TASK, SEGMENT_TASK, closing_task, compile_run
from beatflow.dag.model import DAG, TaskSpec


def make(edges: list[tuple[str, str]], nodes: list[str]) -> DAG:
    dag = DAG("d")
    for n in nodes:
        dag.add_task(TaskSpec(task_id=n, fn=lambda: None))
    for u, v in edges:
        dag.tasks[v].order_upstream.add(u)
    return dag


def app() -> Celery:
    return Celery("t", set_as_current=False, broker="memory://")


def names(sig: Signature) -> list[str]:
    if isinstance(sig, _chord):
        return [*(n for t in sig.tasks for n in names(t)), *names(sig.body)]
    if isinstance(sig, _chain | group):
        return [n for t in sig.tasks for n in names(t)]
    return [sig.task]


def test_a_chain_becomes_a_celery_chain_of_named_tasks_whose_last_closes_the_run():
    canvas = compile_run(app(), make([("a", "b"), ("b", "c")], ["a", "b", "c"]), "r1")
    assert isinstance(canvas, _chain)
    assert names(canvas) == ["d.a", "d.b", "d.c"]  # no separate closing hop
    assert [t.kwargs for t in canvas.tasks] == [{}, {}, {"closes": True}]


def test_a_fan_in_sink_closes_the_run_itself():
    dag = make([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], ["a", "b", "c", "d"])
    assert closing_task(dag) == "d"
    assert names(compile_run(app(), dag, "r1"))[-1] == "d.d"


def test_parallel_sinks_or_a_mapped_sink_end_with_the_closing_step():
    two_sinks = make([("a", "b"), ("a", "c")], ["a", "b", "c"])
    assert closing_task(two_sinks) is None
    assert names(compile_run(app(), two_sinks, "r1"))[-1] == FINISH_TASK
    mapped = make([("a", "b")], ["a", "b"])
    mapped.tasks["b"].map_over = "a"
    assert closing_task(mapped) is None
    canvas = compile_run(app(), mapped, "r1")
    assert names(canvas) == ["d.a", "d.b", FINISH_TASK]
    assert all("closes" not in (t.kwargs or {}) for t in canvas.tasks)


def test_fan_in_becomes_a_chord_and_messages_carry_only_ids():
    dag = make([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], ["a", "b", "c", "d"])
    canvas = compile_run(app(), dag, "r1")
    assert any(isinstance(t, _chord) for t in canvas.tasks)  # group followed by work
    leaf = canvas.tasks[0]
    assert leaf.task == "d.a" and leaf.args == ("r1",) and leaf.immutable


def max_message_bytes(sig: Signature) -> int:
    """The largest JSON payload any single task message of this canvas would carry: the
    signature itself with everything embedded in it (chain remainder, chord body)."""
    biggest = len(json.dumps(dict(sig), default=str))
    for inner in getattr(sig, "tasks", ()) or ():
        biggest = max(biggest, max_message_bytes(inner))
    return biggest


def fan(n: int) -> DAG:
    nodes = ["src", *[f"m{i}" for i in range(n)], "sink"]
    edges = [("src", f"m{i}") for i in range(n)] + [(f"m{i}", "sink") for i in range(n)]
    return make(edges, nodes)


def largest_canvas_bytes(dag: DAG) -> int:
    """The largest message any canvas of this DAG run would carry: the run's own canvas and the
    canvas every segment expands into on a worker."""
    from beatflow.dag.compile import compile_node, plan_for
    from beatflow.dag.plan import Leaf, Node, size

    a = app()
    biggest = max_message_bytes(compile_run(a, dag, "run"))

    def walk(node: Node, path: str) -> None:
        nonlocal biggest
        if isinstance(node, Leaf):
            return
        if size(node) > 64:  # a segment: expanded on a worker
            biggest = max(biggest, max_message_bytes(compile_node(a, dag, "run", node, path)))
            for i, child in enumerate(node.children):
                walk(child, f"{path}.{i}" if path else str(i))

    walk(plan_for(dag).root, "")
    return biggest


def test_no_canvas_grows_with_the_dag_beyond_one_level_of_fanout():
    sizes = {n: largest_canvas_bytes(fan(n)) for n in (100, 1_000, 10_000, 50_000)}
    # at most FANOUT (64) small signatures per canvas, whatever the DAG's size: only the
    # digits of plan paths grow (log n)
    assert all(size < 12 * 1024 for size in sizes.values()), sizes
    assert sizes[50_000] < sizes[10_000] * 1.05, sizes


def test_a_long_chain_is_segmented_too():
    n = 5_000
    nodes = [f"t{i}" for i in range(n)]
    canvas = compile_run(app(), make([(f"t{i}", f"t{i + 1}") for i in range(n - 1)], nodes), "r")
    assert canvas.tasks[0].task == SEGMENT_TASK
    assert max_message_bytes(canvas) < 2_000
