"""The DAG graph in headless Chromium (issue 45, case 9), measured in the DOM: a nine-task DAG
with a ``.map()`` and a task group fits its box at 1280 px (drawn left to right) and at 390 px
(drawn top to bottom, its labels at 0.6 of their size or more: readable), with no task outside
the box and no horizontal scroll of the page; no two nodes overlap, no edge runs under a node it
does not end at; the drawing is chosen by the width of the graph's box, not of the window;
both pages fold the group into one node showing its tasks' worst state, which
the live poll keeps up to date in both drawings; dark mode draws the same graph. Screenshots go
to the test's tmp folder (and BEATFLOW_SCREENSHOTS_DIR)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services
from tests.cluster import Cluster
from tests.cluster import cluster as make_cluster
from tests.web import test_browser as browser_tests
from tests.web.conftest import WebServer

pytestmark = pytest.mark.slow

browser = browser_tests.browser  # the fixtures: Chromium, and a logged-in page in it
page = browser_tests.page
shot = browser_tests.shot
wait_state = browser_tests.wait_state

DAGS = Path(__file__).resolve().parent / "graph_dags"
TASKS = {"list_ids", "fetch_each", "check.schema", "check.rows", "merge", "report", "audit",
         "notify", "archive"}  # fmt: skip
LIVE_MS = 30_000  # a poll every 2 s: a live change shows well within this
WIDTHS = (1280, 390)
SHOWN = {1280: "lr", 390: "tb"}  # the drawing each width shows
READABLE = 0.6  # a node drawn at this fraction of its natural size or more (12 px text: 7 px+)

# the drawing shown (the one of the two with a size), every node's box in the page's pixels
# with its scale (drawn size / natural size), the graph box; and the page's own width
MEASURE = """sel => {
  const wrap = document.querySelector(sel);
  const r = wrap.getBoundingClientRect();
  const shown = [...wrap.querySelectorAll('svg.graph')]
    .filter(s => s.getBoundingClientRect().width > 0);
  const nodes = [...shown[0].querySelectorAll('g.node')].map(g => {
    const rect = g.querySelector('rect');
    const b = rect.getBoundingClientRect();
    const scale = Math.min(b.width / +rect.getAttribute('width'),
                           b.height / +rect.getAttribute('height'));
    return {id: g.dataset.task || 'group:' + g.dataset.group,
            l: b.left, t: b.top, r: b.right, b: b.bottom, scale};
  });
  return {box: {l: r.left, t: r.top, r: r.right, b: r.bottom}, nodes,
          shown: shown.map(s => s.getAttribute('class')),
          page: document.documentElement.scrollWidth, viewport: window.innerWidth};
}"""

# points along each edge (SVG units) inside a node's box: an edge running under a node
UNDER = """sel => {
  const svg = [...document.querySelectorAll(sel + ' svg.graph')]
    .find(s => s.getBoundingClientRect().width > 0);
  const rects = [...svg.querySelectorAll('g.node')].map(g => {
    const r = g.querySelector('rect');
    return {id: g.dataset.task || 'group:' + g.dataset.group, x: +r.getAttribute('x'),
            y: +r.getAttribute('y'), w: +r.getAttribute('width'), h: +r.getAttribute('height')};
  });
  const hits = [];
  for (const p of svg.querySelectorAll('path.edge')) {
    const len = p.getTotalLength();
    for (let s = 0; s <= len; s += 2) {
      const pt = p.getPointAtLength(s);
      for (const r of rects) {
        if (pt.x > r.x + 1 && pt.x < r.x + r.w - 1 && pt.y > r.y + 1 && pt.y < r.y + r.h - 1) {
          hits.push(p.dataset.edge + ' under ' + r.id);
        }
      }
    }
  }
  return [...new Set(hits)];
}"""


@pytest.fixture(scope="module")
def web_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    """The web fixture's cluster, loading this test's DAG folder only."""
    tmp = tmp_path_factory.mktemp("web-graph")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    try:
        with make_cluster(tmp, redis_url, db_url, dags=DAGS) as c:
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)


def open_gate(web: WebServer, run_id: str, name: str) -> None:
    web.cluster.marks.mkdir(parents=True, exist_ok=True)
    (web.cluster.marks / f"gate-{run_id}-{name}").touch()


def fits(pg: Any, sel: str, expect: set[str]) -> None:
    """One drawing shown, the one for the window's width; every node inside the graph box (none
    hidden: the box does not scroll) at a readable size on a narrow screen, none over another,
    the page no wider than the window."""
    m = pg.evaluate(MEASURE, sel)
    assert m["page"] <= m["viewport"], f"the page scrolls sideways: {m['page']} > {m['viewport']}"
    assert m["shown"] == [f"graph {SHOWN[m['viewport']]}"]
    assert {n["id"] for n in m["nodes"]} == expect
    if m["viewport"] < 700:
        small = [f"{n['id']} at {n['scale']:.2f}" for n in m["nodes"] if n["scale"] < READABLE]
        assert not small, f"drawn too small to read: {small}"
    box = m["box"]
    for n in m["nodes"]:
        inside = (
            n["l"] >= box["l"] - 0.5
            and n["r"] <= box["r"] + 0.5
            and n["t"] >= box["t"] - 0.5
            and n["b"] <= box["b"] + 0.5
        )
        assert inside, f"{n['id']} at {n['l']:.0f}..{n['r']:.0f} px, its box {box}"
    nodes = m["nodes"]
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            apart = a["r"] <= b["l"] or b["r"] <= a["l"] or a["b"] <= b["t"] or b["b"] <= a["t"]
            assert apart, f"{a['id']} overlaps {b['id']}"
    assert pg.evaluate(UNDER, sel) == []


def test_the_nine_task_graph_fits_its_box_at_1280_and_390_px_with_edges_around_the_tasks(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    pg.goto(f"{web.url}/dags/web_graph")
    for width in WIDTHS:
        pg.set_viewport_size({"width": width, "height": 900})
        fits(pg, "#graph", TASKS)
        shot(page, tmp_path, f"graph-dag-{width}")
    # "actual size": the graph at its natural size scrolls inside its box, not the page
    pg.click("button.graph-zoom[data-graph=graph]")
    m = pg.evaluate(MEASURE, "#graph")
    assert m["page"] <= m["viewport"]
    scroll = pg.evaluate("document.getElementById('graph').scrollWidth")
    assert scroll > m["box"]["r"] - m["box"]["l"]
    pg.click("button.graph-zoom[data-graph=graph]")  # and back to fit
    fits(pg, "#graph", TASKS)
    # the group folded from the narrow drawing: one node for its two tasks, in both drawings,
    # and still everything fits
    pg.click("#graph svg.tb g.group[data-group=check] a.group-toggle")
    pg.wait_for_selector("#graph svg.tb g.group-node[data-group=check]")
    folded = (TASKS - {"check.schema", "check.rows"}) | {"group:check"}
    for width in (390, 1280):
        pg.set_viewport_size({"width": width, "height": 900})
        fits(pg, "#graph", folded)
    pg.set_viewport_size({"width": 390, "height": 900})
    shot(page, tmp_path, "graph-dag-collapsed-390")


def test_the_drawing_follows_the_width_of_the_graph_box_not_of_the_window(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    """A narrow graph box in a wide window (a side panel, the graph beside other content) shows
    the top-to-bottom drawing, a wide box in a narrow window the left-to-right one."""
    pg: Any = page
    pg.goto(f"{web.url}/dags/web_graph")
    shown = """sel => [...document.querySelectorAll(sel + ' svg.graph')]
      .filter(s => s.getBoundingClientRect().width > 0).map(s => s.getAttribute('class'))"""
    box = "([sel, w]) => { document.querySelector(sel).style.width = w; }"
    try:
        for window, width, drawing in ((1280, "400px", "tb"), (600, "1000px", "lr")):
            pg.set_viewport_size({"width": window, "height": 900})
            pg.evaluate(box, ["#graph", width])
            assert pg.evaluate(shown, "#graph") == [f"graph {drawing}"], (window, width)
            shot(page, tmp_path, f"graph-box-{width}-in-{window}")
            pg.evaluate(box, ["#graph", ""])  # the box as the page draws it: the window's
            assert pg.evaluate(shown, "#graph") == [f"graph {SHOWN.get(window, 'tb')}"]
    finally:
        pg.evaluate(box, ["#graph", ""])
        pg.set_viewport_size({"width": 1280, "height": 900})


def test_the_run_page_folds_a_group_into_its_worst_state_and_the_poll_keeps_it(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    with web.client() as c:
        run_id = c.post("/api/v1/dags/web_graph/runs", json={}).json()["run_id"]
    try:
        base = f"{web.url}/dags/web_graph/runs/{run_id}"
        pg.goto(base)
        for width in WIDTHS:
            pg.set_viewport_size({"width": width, "height": 900})
            fits(pg, "#run-graph", TASKS)
        shot(page, tmp_path, "graph-run-390")
        pg.set_viewport_size({"width": 1280, "height": 900})
        # the run page has the toggle too: check.rows waits at its gate, so the group is not done
        pg.click("#run-graph svg.lr g.group[data-group=check] a.group-toggle")
        group = pg.locator("#run-graph svg.lr g.group-node[data-group=check]")
        group.wait_for()
        assert "state-success" not in group.get_attribute("class")
        assert pg.locator("#run-graph g.node[data-task='check.rows']").count() == 0
        fits(pg, "#run-graph", (TASKS - {"check.schema", "check.rows"}) | {"group:check"})
        pg.evaluate("window.__same_page = true")  # a reload would forget it
        open_gate(web, run_id, "check")
        # the poll colours the folded group when its tasks are done, the run still running
        pg.wait_for_selector(
            "#run-graph svg.lr g.group-node.state-success[data-group=check]", timeout=LIVE_MS
        )
        assert pg.evaluate("window.__same_page === true")
        assert pg.locator("#run-state .state-running").count() == 1
        shot(page, tmp_path, "graph-run-collapsed-live")
        # the narrow drawing is kept up to date too: shown at 390 px, its group coloured
        pg.set_viewport_size({"width": 390, "height": 900})
        fits(pg, "#run-graph", (TASKS - {"check.schema", "check.rows"}) | {"group:check"})
        tall = pg.locator("#run-graph svg.tb g.group-node[data-group=check]")
        assert "state-success" in tall.get_attribute("class")
        shot(page, tmp_path, "graph-run-collapsed-live-390")
        open_gate(web, run_id, "report")
        wait_state(page, "success")  # the page reloads at the end: still folded
        assert pg.locator("#run-graph g.group-node.state-success[data-group=check]").count() == 2
        pg.click("#run-graph svg.tb g.group-node[data-group=check]")  # open it again, at 390
        pg.wait_for_selector("#run-graph svg.tb g.node.state-success[data-task='check.rows']")
        assert "/runs/" in pg.url and "collapsed" not in pg.url
        fits(pg, "#run-graph", TASKS)
    finally:
        open_gate(web, run_id, "check")
        open_gate(web, run_id, "report")
        web.wait_run("web_graph", run_id, timeout=120.0)


def test_dark_mode_draws_the_graph_on_a_dark_box(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    pg.emulate_media(color_scheme="dark")
    pg.goto(f"{web.url}/dags/web_graph")
    colour = "([s, p]) => getComputedStyle(document.querySelector(s)).getPropertyValue(p)"
    assert pg.evaluate(colour, ["#graph", "background-color"]) == "rgb(28, 32, 41)"  # --panel
    label = pg.evaluate(colour, ["#graph g.group text", "fill"])
    assert label == "rgb(221, 227, 238)"  # --fg: light on dark
    fits(pg, "#graph", TASKS)
    shot(page, tmp_path, "graph-dag-dark")
