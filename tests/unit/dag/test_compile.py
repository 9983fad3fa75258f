"""Plan -> Celery canvas: shapes, ids-only messages, bounded message size for big DAGs."""

from __future__ import annotations

import json

from celery import Celery
from celery.canvas import Signature, _chain, _chord, group

from beatflow.dag.compile import SEGMENT_TASK, compile_run
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


def test_a_chain_becomes_a_celery_chain_of_named_tasks_then_the_closing_step():
    canvas = compile_run(app(), make([("a", "b"), ("b", "c")], ["a", "b", "c"]), "r1")
    assert isinstance(canvas, _chain)
    assert names(canvas) == ["d.a", "d.b", "d.c", "beatflow.finish_run"]


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


def test_the_first_message_does_not_grow_with_the_dag():
    sizes = {}
    for n in (100, 1_000, 10_000):
        nodes = ["src", *[f"m{i}" for i in range(n)], "sink"]
        edges = [("src", f"m{i}") for i in range(n)] + [(f"m{i}", "sink") for i in range(n)]
        canvas = compile_run(app(), make(edges, nodes), "run")
        sizes[n] = max_message_bytes(canvas)
    assert sizes[10_000] == sizes[1_000] == sizes[100], sizes


def test_a_long_chain_is_segmented_too():
    n = 5_000
    nodes = [f"t{i}" for i in range(n)]
    canvas = compile_run(app(), make([(f"t{i}", f"t{i + 1}") for i in range(n - 1)], nodes), "r")
    assert canvas.tasks[0].task == SEGMENT_TASK
    assert max_message_bytes(canvas) < 2_000
