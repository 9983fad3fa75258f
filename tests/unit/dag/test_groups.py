"""Task groups: prefixed ids, nesting, group edges (roots and leaves), per-group default_args,
.map() inside a group, the @task_group decorator, and the tree the grid and the graph draw."""

from __future__ import annotations

import pytest

from beatflow import DAG, TaskGroup, task, task_group
from beatflow.dag import groups
from beatflow.errors import DagDefinitionError
from beatflow.web.graph import render_svg, visible_nodes


@task
def start() -> list[int]:
    return [1, 2]


@task
def step(x: object = None) -> object:
    return x


@task
def total(xs: list[int]) -> int:
    return sum(xs)


def test_a_group_prefixes_ids_and_nested_groups_prefix_again() -> None:
    with DAG("d") as dag, TaskGroup("extract"):
        step()
        with TaskGroup("inner"):
            step.override(task_id="named")()
    assert list(dag.model.tasks) == ["extract.step", "extract.inner.named"]
    assert dag.model.groups["extract.inner"].parent == "extract"
    assert groups.members(dag.model, "extract") == ["extract.step", "extract.inner.named"]
    dag.model.validate()


def test_group_edges_go_from_and_to_the_groups_leaves_and_roots() -> None:
    with DAG("d") as dag:
        first = step.override(task_id="first")()
        with TaskGroup("g") as g:
            a = step.override(task_id="a")()
            b = step.override(task_id="b")()
            step.override(task_id="c")(a)  # a -> c inside: c is not a root, a is not a leaf
        last = step.override(task_id="last")()
        first >> g >> last
    m = dag.model
    assert groups.TaskGroup.roots(g) == ["g.a", "g.b"]
    assert sorted(m.tasks["last"].upstream) == ["g.b", "g.c"]
    assert m.tasks["g.a"].upstream == {"first"} and m.tasks["g.b"].upstream == {"first"}
    assert m.tasks["g.c"].upstream == {"g.a"}
    assert b.task_id == "g.b"


def test_lists_and_reversed_shifts_of_groups_work_too() -> None:
    with DAG("d") as dag:
        with TaskGroup("g1") as g1:
            step()
        with TaskGroup("g2") as g2:
            step()
        end = step.override(task_id="end")()
        [g1, g2] >> end
        end << g1
        g2 << step.override(task_id="begin")()
    m = dag.model
    assert m.tasks["end"].upstream == {"g1.step", "g2.step"}
    assert m.tasks["g2.step"].upstream == {"begin"}


def test_group_default_args_merge_over_the_dags_and_an_outer_groups() -> None:
    with DAG("d", default_args={"retries": 1, "queue": "dagq"}) as dag:
        with TaskGroup("outer", default_args={"retries": 3}):
            with TaskGroup("inner", default_args={"queue": "io"}):
                step()
            step.override(task_id="own", retries=5)()
        step.override(task_id="outside")()
    t = dag.model.tasks
    assert (t["outer.inner.step"].retry.retries, t["outer.inner.step"].queue) == (3, "io")
    assert (t["outer.own"].retry.retries, t["outer.own"].queue) == (5, "dagq")
    assert (t["outside"].retry.retries, t["outside"].queue) == (1, "dagq")


def test_map_inside_a_group_fans_out_over_a_task_outside_it() -> None:
    with DAG("d") as dag:
        parts = start()
        with TaskGroup("process"):
            squares = step.map(parts)
        total(squares)
    m = dag.model
    assert m.tasks["process.step"].map_over == "start"
    assert m.tasks["total"].data_upstream == {"process.step"}


def test_the_decorator_names_the_group_after_the_function_and_passes_results_on() -> None:
    @task_group(default_args={"retries": 2})
    def transform(x: object) -> object:
        """Clean and enrich."""
        return step(step(x))

    with DAG("d") as dag:
        out = transform(start())
        again = transform(out)
        total(again)
    m = dag.model
    assert list(m.groups) == ["transform", "transform__1"]
    assert m.groups["transform"].tooltip == "Clean and enrich."
    assert m.tasks["total"].data_upstream == {"transform__1.step__1"}
    assert m.tasks["transform.step"].retry.retries == 2
    assert transform(3) == 3  # outside a DAG: the plain function


def test_a_decorated_group_returning_nothing_is_the_group_for_edges() -> None:
    @task_group
    def pair() -> None:
        step.override(task_id="x")()
        step.override(task_id="y")()

    with DAG("d") as dag:
        pair() >> step.override(task_id="after")()
    assert dag.model.tasks["after"].upstream == {"pair.x", "pair.y"}


def test_group_mistakes_are_definition_errors() -> None:
    with pytest.raises(DagDefinitionError, match="inside a DAG block"):
        TaskGroup("loose")
    with DAG("d"):
        TaskGroup("g")
        with pytest.raises(DagDefinitionError, match='duplicate task group "g"'):
            TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="invalid group id"):
            TaskGroup("a.b")
        with pytest.raises(DagDefinitionError, match="unknown default_args"):
            TaskGroup("h", default_args={"retires": 1})


def test_the_grid_rows_keep_each_groups_tasks_together_under_it() -> None:
    with DAG("d") as dag:
        first = step.override(task_id="first")()
        with TaskGroup("g"):
            a = step.override(task_id="a")(first)
        mid = step.override(task_id="mid")(first)
        with TaskGroup("g2"):
            step.override(task_id="b")(mid)
        with TaskGroup("g3"):
            step.override(task_id="c")(a)
    rows = groups.tree_order(dag.model, dag.model.topological_order())
    assert rows == [
        ("task", "first", 0),
        ("group", "g", 0),
        ("task", "g.a", 1),
        ("task", "mid", 0),
        ("group", "g2", 0),
        ("task", "g2.b", 1),
        ("group", "g3", 0),
        ("task", "g3.c", 1),
    ]


def test_a_collapsed_group_is_one_node_in_the_graph() -> None:
    with DAG("d") as dag:
        first = step.override(task_id="first")()
        with TaskGroup("g") as g:
            with TaskGroup("inner"):
                step.override(task_id="a")()
            step.override(task_id="b")()
        first >> g >> step.override(task_id="last")()
    m = dag.model
    assert visible_nodes(m, {"g"})["g.inner.a"] == "group:g"
    assert visible_nodes(m, {"g.inner"})["g.inner.a"] == "group:g.inner"
    states = {"first": "success", "g.inner.a": "failed", "g.b": "success"}
    open_svg = render_svg(m, states, collapsed=(), toggle=lambda gid: f"?collapsed={gid}")
    assert 'data-task="g.inner.a"' in open_svg and 'class="group"' in open_svg
    shut = render_svg(m, states, collapsed={"g"}, toggle=lambda gid: "?")
    assert 'data-task="g.inner.a"' not in shut
    assert 'class="node group-node state-failed" data-group="g"' in shut
    assert shut.count('class="edge"') == 2  # first -> g -> last


def test_a_task_a_mark_overrules_keeps_its_state_flagged_and_so_does_its_folded_group() -> None:
    with DAG("d") as dag:
        with TaskGroup("g"):
            step.override(task_id="a")()
        step.override(task_id="b")()
    m, note = dag.model, "run marked success by user:ann"
    states = {"g.a": "failed", "b": "success"}
    svg = render_svg(m, states, marked={"g.a": note})
    assert 'class="node overruled state-failed" data-task="g.a"' in svg
    assert f"<title>g.a: failed ({note})</title>" in svg and svg.count('class="flag"') == 1
    assert 'class="node state-success" data-task="b"' in svg
    shut = render_svg(m, states, collapsed={"g"}, marked={"g.a": note})
    assert 'class="node group-node overruled state-failed" data-group="g"' in shut
    assert render_svg(m, states) == render_svg(m, states, marked={})  # no mark: as before
    assert 'class="flag"' not in render_svg(m, states)


def test_mermaid_draws_each_group_as_a_subgraph_around_its_tasks() -> None:
    from beatflow.dag.render import render_mermaid

    with DAG("d") as dag, TaskGroup("g"):
        with TaskGroup("inner"):
            step.override(task_id="a")()
        step.override(task_id="b")()
    assert render_mermaid(dag.model).splitlines()[:7] == [
        "flowchart LR",
        '    subgraph t_group_g["g"]',
        '        subgraph t_group_g_inner["g.inner"]',
        '            t_g_inner_a["g.inner.a"]',
        "        end",
        '        t_g_b["g.b"]',
        "    end",
    ]
