"""The web UI's graph layout (beatflow.web.graph_layout), by its properties on any graph with any
nesting of groups, in both orientations: no two boxes overlap, a group's box holds its members
(under its label's room) and nothing else, every edge runs in the direction of the layers (left
to right, or top to bottom) around every box it does not end at, and the same input gives the
same layout, in another process too (nothing hangs on a set's order)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beatflow import DAG, TaskGroup, task
from beatflow.web.graph import layout, render_svgs
from beatflow.web.graph_layout import (
    LABEL_H,
    NODE_H,
    NODE_W,
    Box,
    Direction,
    Layout,
    Route,
    layered,
)

EPS = 1e-6
DIRECTIONS: tuple[Direction, ...] = ("LR", "TB")


@st.composite
def graphs(draw: Any) -> tuple[list[str], list[tuple[str, str]], dict[str, Any], dict[str, Any]]:
    n = draw(st.integers(1, 14))
    nodes = [f"t{i}" for i in range(n)]
    n_groups = draw(st.integers(0, 4))
    group_parent: dict[str, str | None] = {}
    for g in range(n_groups):
        group_parent[f"g{g}"] = draw(st.sampled_from([None, *group_parent]))
    parent = {t: draw(st.sampled_from([None, *group_parent])) for t in nodes}
    pairs = st.tuples(st.sampled_from(nodes), st.sampled_from(nodes))
    acyclic = draw(st.booleans())
    edges = [
        (a, b) if not acyclic or a < b else (b, a)
        for a, b in draw(st.lists(pairs, max_size=3 * n))
        if a != b
    ]
    return nodes, edges, parent, group_parent


def _inside(inner: Box, outer: Box) -> bool:
    return (
        inner.x >= outer.x - EPS
        and inner.y >= outer.y - EPS
        and inner.x + inner.w <= outer.x + outer.w + EPS
        and inner.y + inner.h <= outer.y + outer.h + EPS
    )


def _overlap(a: Box, b: Box) -> bool:
    """The interiors meet (touching borders do not count)."""
    return (
        a.x < b.x + b.w - EPS
        and b.x < a.x + a.w - EPS
        and a.y < b.y + b.h - EPS
        and b.y < a.y + a.h - EPS
    )


def _members(group: str, parent: dict[str, Any], group_parent: dict[str, Any]) -> set[str]:
    def chain(g: str | None) -> list[str]:
        out = []
        while g is not None:
            out.append(g)
            g = group_parent[g]
        return out

    return {t for t, g in parent.items() if group in chain(g)}


def _segments(points: Sequence[tuple[float, float]]) -> list[Box]:
    """Each segment's bounding box: a drawn curve between two points stays inside it."""
    out = []
    for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False):
        out.append(Box(min(x1, x2), min(y1, y2), abs(x2 - x1), abs(y2 - y1)))
    return out


def _check(
    lay: Layout,
    nodes: list[str],
    edges: list[tuple[str, str]],
    parent: dict[str, Any],
    group_parent: dict[str, Any],
    direction: Direction = "LR",
) -> None:
    assert list(lay.nodes) == nodes or set(lay.nodes) == set(nodes)
    whole = Box(0, 0, lay.width, lay.height)
    boxes = list(lay.nodes.items())
    for i, (a, box_a) in enumerate(boxes):
        assert (box_a.w, box_a.h) == (NODE_W, NODE_H), a  # a node is as wide either way
        assert _inside(box_a, whole), a
        for b, box_b in boxes[i + 1 :]:
            assert not _overlap(box_a, box_b), (a, b)
    for g, gbox in lay.groups.items():
        assert _inside(gbox, whole)
        members = _members(g, parent, group_parent)
        assert members, g  # only groups with something in them are drawn
        for t, box in lay.nodes.items():
            if t in members:
                assert _inside(box, gbox), (t, g)
                assert box.y >= gbox.y + LABEL_H - EPS, (t, g)  # under the group's label
            else:
                assert not _overlap(box, gbox), (t, g)
        for h, hbox in lay.groups.items():  # nested or apart
            if h != g and _overlap(gbox, hbox):
                assert _inside(gbox, hbox) or _inside(hbox, gbox), (g, h)
    assert {(r.src, r.dst) for r in lay.routes} == {(a, b) for a, b in edges}
    for r in lay.routes:
        _check_route(lay, r, parent, group_parent, direction)


def _check_route(
    lay: Layout,
    r: Route,
    parent: dict[str, Any],
    group_parent: dict[str, Any],
    direction: Direction,
) -> None:
    """From the right (bottom) side of where it starts to the left (top) side of where it ends,
    left to right (top to bottom), around every node and every group it does not end in."""
    first, last = (r.dst, r.src) if r.reversed else (r.src, r.dst)
    start, end = lay.nodes[first], lay.nodes[last]
    if direction == "LR":
        assert r.points[0] == (start.x + start.w, start.y + start.h / 2)
        assert r.points[-1] == (end.x, end.y + end.h / 2)
        assert start.x + start.w <= end.x
    else:
        assert r.points[0] == (start.x + start.w / 2, start.y + start.h)
        assert r.points[-1] == (end.x + end.w / 2, end.y)
        assert start.y + start.h <= end.y
    along = [p[0] if direction == "LR" else p[1] for p in r.points]
    assert along == sorted(along), r  # the layers follow the edges
    ends = {r.src, r.dst}
    for seg in _segments(r.points):
        for t, box in lay.nodes.items():
            assert not _overlap(seg, box), (r.src, r.dst, t)
        for g, gbox in lay.groups.items():
            if not ends & _members(g, parent, group_parent):
                assert not _overlap(seg, gbox), (r.src, r.dst, g)


@pytest.mark.parametrize("direction", DIRECTIONS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_any_graph_lays_out_without_overlaps_and_with_edges_around_the_boxes(
    direction: Direction,
    graph: tuple[list[str], list[tuple[str, str]], dict[str, Any], dict[str, Any]],
) -> None:
    nodes, edges, parent, group_parent = graph
    lay = layered(nodes, edges, parent, group_parent, direction=direction)
    _check(lay, nodes, edges, parent, group_parent, direction)
    assert layered(nodes, edges, parent, group_parent, direction=direction) == lay  # again


@pytest.mark.parametrize("direction", DIRECTIONS)
@settings(max_examples=100, deadline=None)
@given(graphs())
def test_a_graph_without_cycles_reverses_no_edge(
    direction: Direction,
    graph: tuple[list[str], list[tuple[str, str]], dict[str, Any], dict[str, Any]],
) -> None:
    nodes, edges, _, _ = graph
    forward = [(a, b) if a < b else (b, a) for a, b in edges]
    lay = layered(nodes, forward, direction=direction)
    assert not any(r.reversed for r in lay.routes)
    _check(lay, nodes, forward, {}, {}, direction)


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_a_group_is_as_wide_as_its_label_needs_either_way(
    graph: tuple[list[str], list[tuple[str, str]], dict[str, Any], dict[str, Any]],
) -> None:
    nodes, edges, parent, group_parent = graph
    wide = {g: 500.0 for g in group_parent}
    for direction in DIRECTIONS:
        lay = layered(nodes, edges, parent, group_parent, wide, direction)
        assert all(box.w >= 500.0 for box in lay.groups.values()), direction
        _check(lay, nodes, edges, parent, group_parent, direction)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_a_chain_is_one_straight_line_and_a_long_edge_goes_around(direction: Direction) -> None:
    across = 1 if direction == "LR" else 0  # the coordinate a chain keeps
    lay = layered(["a", "b", "c"], [("a", "b"), ("b", "c")], direction=direction)
    assert len({(box.x, box.y)[across] for box in lay.nodes.values()}) == 1
    assert all(len({p[across] for p in r.points}) == 1 for r in lay.routes)
    # a -> c as well: it may not cross b
    edges = [("a", "b"), ("b", "c"), ("a", "c")]
    lay = layered(["a", "b", "c"], edges, direction=direction)
    _check(lay, ["a", "b", "c"], edges, {}, {}, direction)


def test_two_crossing_edges_are_uncrossed() -> None:
    # a -> d and b -> c with a above b: the order of the second layer puts d above c
    lay = layered(["a", "b", "c", "d"], [("a", "d"), ("b", "c")])
    assert (lay.nodes["a"].y < lay.nodes["b"].y) == (lay.nodes["d"].y < lay.nodes["c"].y)
    # top to bottom: the same with left for above
    lay = layered(["a", "b", "c", "d"], [("a", "d"), ("b", "c")], direction="TB")
    assert (lay.nodes["a"].x < lay.nodes["b"].x) == (lay.nodes["d"].x < lay.nodes["c"].x)


@task
def step(x: Any = None) -> int:
    return 1


def nine_tasks() -> Any:
    """The issue's case: nine tasks, one of them a ``.map()``, and a group."""
    with DAG("nine") as dag:
        ids = step.override(task_id="list_ids")()
        fan = step.override(task_id="fetch_each").map(ids)
        with TaskGroup("check"):
            schema = step.override(task_id="schema")(fan)
            rows = step.override(task_id="rows")(fan)
        merged = step.override(task_id="merge")(schema)
        rows >> merged
        report = step.override(task_id="report")(merged)
        audit = step.override(task_id="audit")(ids)
        notify = step.override(task_id="notify")(report)
        audit >> notify
        step.override(task_id="archive")(notify)
    return dag.model


def test_the_nine_task_dag_with_a_map_is_at_most_six_layers_wide() -> None:
    dag = nine_tasks()
    lay = layout(dag)
    assert len(lay.nodes) == 9
    assert lay.width < 1500  # 1,570 px before (a task hidden at 1,800 px)
    groups = {g: b for g, b in lay.groups.items()}
    assert set(groups) == {"check"}
    shut = layout(dag, {"check"})
    assert "group:check" in shut.nodes and len(shut.nodes) == 8


def test_top_to_bottom_the_nine_task_dag_is_narrow_enough_to_read_on_a_phone() -> None:
    """At 390 px the graph's box is about 350 px wide: the drawing at most 580 px wide keeps
    its labels at 0.6 of their size or more."""
    dag = nine_tasks()
    for shut in ((), {"check"}):
        tall = layout(dag, shut, "TB")
        assert tall.width <= 580, shut
        assert tall.height > tall.width  # it grows down the page instead
        parent = {n: "check" for n in tall.nodes if n.startswith("check.")}
        edges = [(r.src, r.dst) for r in tall.routes]
        _check(tall, list(tall.nodes), edges, parent, {"check": None}, "TB")


def test_a_page_gets_both_drawings_each_with_its_own_arrow() -> None:
    both = render_svgs(nine_tasks(), {"merge": "failed"})
    assert both.count("<svg ") == 2
    assert 'class="graph lr"' in both and 'class="graph tb"' in both
    assert both.index('class="graph lr"') < both.index('class="graph tb"')
    assert both.count('<marker id="arrow-lr"') == both.count('<marker id="arrow-tb"') == 1
    assert both.count('class="node state-failed" data-task="merge"') == 2


SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.unit.test_graph_layout import nine_tasks
from beatflow.web.graph import render_svgs
dag = nine_tasks()
print(render_svgs(dag, {{"merge": "failed"}}) + render_svgs(dag, collapsed={{"check"}}))
"""


def test_the_same_dag_draws_the_same_svg_in_another_process() -> None:
    root = os.getcwd()
    out = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(root=root)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        out.append(done.stdout)
    dag = nine_tasks()
    here = render_svgs(dag, {"merge": "failed"}, collapsed=()) + render_svgs(
        dag, collapsed={"check"}
    )
    assert out[0] == out[1] == here + "\n"
