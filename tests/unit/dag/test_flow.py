"""Control flow without a worker: which control tasks gate which tasks, what a branch records,
and what a recorded decision skips (the node decision with its gates)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from beatflow import DAG, Skip, TaskGroup, task
from beatflow.dag import flow
from beatflow.errors import DagDefinitionError
from beatflow.execution.decide import Action, Situation, decide


@dataclass(frozen=True)
class Row:
    task_id: str
    state: str
    result: Any = None
    map_index: int = -1
    map_count: int | None = None


@task.branch
def pick() -> str:
    return "a"


@task.short_circuit
def check() -> int:
    return 0


@task.short_circuit(ignore_downstream_trigger_rules=False)
def check_direct() -> int:
    return 0


@task
def a() -> None: ...


@task
def b() -> None: ...


@task(trigger_rule="all_done")
def c() -> None: ...


def test_a_branch_gates_its_direct_downstream_and_keeps_what_is_below_a_followed_task():
    with DAG("g") as dag:
        p, ta, tb, tc = pick(), a(), b(), c()
        p >> [ta, tb, tc]
        ta >> tc
    gates = {t: flow.gates(dag.model, t) for t in dag.model.tasks}
    assert gates["pick"] == ()
    assert gates["a"] == (flow.Gate("pick", flow.BRANCH, frozenset({"a"})),)
    assert gates["c"] == (flow.Gate("pick", flow.BRANCH, frozenset({"a", "c"})),)


def test_a_short_circuit_gates_everything_below_it_or_only_its_direct_downstream():
    with DAG("s") as dag:
        ta, tb = a(), b()
        check() >> ta >> tb
        tc = c()
        check_direct() >> tc >> b.override(task_id="b2")()
    gated = {t: [g.task_id for g in flow.gates(dag.model, t)] for t in dag.model.tasks}
    assert gated["a"] == ["check"] and gated["b"] == ["check"]  # below it, at any depth
    assert gated["c"] == ["check_direct"] and gated["b2"] == []


@pytest.mark.parametrize(
    "value, recorded",
    [("a", ["a"]), (["b", "a", "b"], ["b", "a"]), (None, []), ((), []), ({"b", "a"}, ["a", "b"])],
)
def test_a_branch_records_the_ids_it_followed_as_a_list(value, recorded):
    with DAG("o") as dag:
        pick() >> [a(), b()]
    assert flow.outcome(dag.model, dag.model.tasks["pick"], value) == recorded


def test_a_branch_that_returns_a_task_group_id_follows_the_groups_roots_below_it():
    with DAG("grouped") as dag:
        p = pick()
        with TaskGroup("g") as g:
            ga = a()
            b()
            ga >> c()  # g.c: inside the group, below a root
        with TaskGroup("outer"), TaskGroup("inner") as inner:
            a()
        with TaskGroup("apart"):
            b()  # apart.b: no edge from the branch
        p >> [g, inner]
    spec = dag.model.tasks["pick"]
    assert flow.outcome(dag.model, spec, "g") == ["g.a", "g.b"]
    assert flow.outcome(dag.model, spec, ["outer", "g.b"]) == ["outer.inner.a", "g.b"]
    assert flow.outcome(dag.model, spec, "outer.inner") == ["outer.inner.a"]
    with pytest.raises(ValueError, match=r"returned the task group 'apart', none of whose root"):
        flow.outcome(dag.model, spec, "apart")
    with pytest.raises(ValueError, match=r"returned 'g\.c', not one of its direct downstream"):
        flow.outcome(dag.model, spec, ["g", "g.c"])


def test_a_branch_that_names_another_task_or_returns_something_else_fails():
    with DAG("o") as dag:
        p = pick()
        ta = a()
        p >> ta
        ta >> b()
    spec = dag.model.tasks["pick"]
    with pytest.raises(
        ValueError, match=r"returned 'b', not one of its direct downstream tasks \(a\)"
    ):
        flow.outcome(dag.model, spec, ["a", "b"])
    with pytest.raises(TypeError, match="must return a task id, a list of task ids or None"):
        flow.outcome(dag.model, spec, 3)
    assert flow.outcome(dag.model, dag.model.tasks["a"], 0) == 0  # not a control task: as is


def situation(rule: str, rows: list[Row], gates: tuple[flow.Gate, ...]) -> Situation:
    return Situation(
        trigger_rule=rule,
        upstream=["up"],
        mapped=[],
        rows=rows,
        own=None,
        waits=0,
        retries=0,
        gates=gates,
    )


BRANCH = (flow.Gate("up", flow.BRANCH, frozenset({"me"})),)
SHORT = (flow.Gate("up", flow.SHORT_CIRCUIT),)


@pytest.mark.parametrize(
    "gates, result, rule, action",
    [
        (BRANCH, ["me"], "all_success", Action.CLAIM),
        (BRANCH, ["other"], "all_success", Action.SKIPPED),
        (BRANCH, ["other"], "always", Action.SKIPPED),  # whatever the trigger rule
        (BRANCH, [], "all_done", Action.SKIPPED),
        (SHORT, 0, "all_done", Action.SKIPPED),
        (SHORT, "", "always", Action.SKIPPED),
        (SHORT, [1], "all_success", Action.CLAIM),
        ((), 0, "all_success", Action.CLAIM),  # no gate: a falsy result is just a result
    ],
)
def test_the_decision_reads_the_recorded_decision_before_the_trigger_rule(
    gates, result, rule, action
):
    got = decide(situation(rule, [Row("up", "success", result)], gates))
    assert got.action is action


def test_a_control_task_that_did_not_succeed_leaves_the_decision_to_the_trigger_rule():
    for state, action in [("failed", Action.UPSTREAM_FAILED), ("skipped", Action.SKIPPED)]:
        got = decide(situation("all_success", [Row("up", state)], BRANCH))
        assert got.action is action and got.reason == "trigger rule all_success"
    got = decide(situation("all_done", [Row("up", "failed")], SHORT))
    assert got.action is Action.CLAIM


def test_the_reason_names_the_control_task_and_its_decision():
    got = decide(situation("all_success", [Row("up", "success", ["x", "y"])], BRANCH))
    assert got.reason == "branch up followed x, y"
    got = decide(situation("all_success", [Row("up", "success", [])], BRANCH))
    assert got.reason == "branch up followed no task"
    got = decide(situation("all_success", [Row("up", "success", 0)], SHORT))
    assert got.reason == "short-circuit up returned 0"


def test_control_tasks_cannot_be_mapped_and_skip_carries_its_reason():
    with pytest.raises(DagDefinitionError, match="cannot be .map"), DAG("m"):
        pick.map(a())
    assert Skip("why").reason == "why"
    assert pick() == "a"  # outside a DAG: the function itself


def test_dags_show_names_each_control_task():
    from beatflow.dag.render import render_text

    with DAG("shown") as dag:
        pick() >> a()
        check() >> b()
        check_direct() >> c()
    text = render_text(dag.model)
    assert "pick  [branch]" in text
    assert "check  [short-circuit]" in text
    assert "check_direct  [short-circuit-direct]" in text
