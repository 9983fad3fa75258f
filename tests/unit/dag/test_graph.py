"""Graph walks (beatflow.dag.graph): the topological order keeps definition order among ready
tasks, a cycle is named as a path, and descendants/ancestors follow edges transitively."""

from __future__ import annotations

import graphlib

import pytest

from beatflow import DAG, task
from beatflow.dag import graph
from beatflow.dag.model import DAG as DagModel
from beatflow.dag.model import TaskSpec
from beatflow.errors import DagDefinitionError


@task
def step() -> None:
    return None


def _diamond() -> DagModel:
    with DAG("diamond") as dag:
        top, left, right, bottom, alone = (step.override(task_id=t)() for t in "tlrba")
        top >> [left, right]
        [left, right] >> bottom
    return dag.model


def test_the_order_puts_upstream_first_and_breaks_ties_by_definition_order() -> None:
    assert graph.topological_order({"z": [], "a": ["z"], "m": [], "b": ["m", "z"]}) == [
        "z",
        "a",
        "m",
        "b",
    ]
    assert _diamond().topological_order() == ["t", "l", "r", "b", "a"]


def test_a_cycle_is_a_graphlib_error_from_the_order_and_a_path_from_find_cycle() -> None:
    cyclic = {"a": ["c"], "b": ["a"], "c": ["b"], "d": []}
    with pytest.raises(graphlib.CycleError):
        graph.topological_order(cyclic)
    assert graph.find_cycle(cyclic) == ["a", "b", "c", "a"]
    assert graph.find_cycle({"a": [], "b": ["a"]}) == []


def test_an_unvalidated_cyclic_dag_names_its_cycle_and_where_it_starts() -> None:
    model = DagModel("loop", file="dags/loop.py", line=3)
    for tid, ups in {"x": ("z",), "y": ("x",), "z": ("y",)}.items():
        spec = TaskSpec(tid, step, file="dags/loop.py", line=10 + ord(tid) - ord("x"))
        spec.order_upstream.update(ups)
        model.add_task(spec)
    with pytest.raises(DagDefinitionError, match=r"dags/loop.py:10: .*cycle: x -> y -> z -> x"):
        model.topological_order()


def test_descendants_and_ancestors_are_transitive_and_skip_the_given_tasks() -> None:
    dag = _diamond()
    assert graph.descendants(dag, ["t"]) == {"l", "r", "b"}
    assert graph.descendants(dag, {"l", "r"}) == {"b"}
    assert graph.descendants(dag, ["t", "l"]) == {"l", "r", "b"}  # l is below t
    assert graph.descendants(dag, ["a", "nope"]) == set()
    assert graph.ancestors(dag, ["b"]) == {"t", "l", "r"}
    assert graph.ancestors(dag, ["t"]) == set()
