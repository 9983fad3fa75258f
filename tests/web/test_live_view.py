"""The live run and task pages in headless Chromium against a real worker, held open by gate
files the test creates: rows updated by the poll keep every column, a map's instances appear as
they are created and its row says ``running`` meanwhile, the task page follows its task run
(state, tries, log tail) without a reload, and log lines are shown whole with a wrap toggle.
Issue 45's case 7 (the map of every case is tests/web/test_browser_cases.py's docstring).
Screenshots go to the test's tmp folder and the run's artifacts (tests/artifacts.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import wait_for
from tests.web import test_browser as browser_tests
from tests.web.conftest import WebServer

pytestmark = pytest.mark.slow

browser = browser_tests.browser  # the fixtures: Chromium, and a logged-in page in it
page = browser_tests.page
shot = browser_tests.shot

LIVE_MS = 30_000  # a poll every 2 s: a live change shows well within this
NO_RELOAD = "window.__same_page"


@pytest.fixture
def run(web: WebServer) -> Iterator[tuple[str, str]]:
    """A run of web_live; its gates are opened at the end whatever the test did."""
    with web.client() as c:
        body = c.post("/api/v1/dags/web_live/runs", json={}).json()
    run_id = body["run_id"]
    yield run_id, f"{web.url}/dags/web_live/runs/{run_id}"
    open_gate(web, run_id, "map")
    open_gate(web, run_id, "hold")
    web.wait_run("web_live", run_id, timeout=120.0)


def open_gate(web: WebServer, run_id: str, name: str) -> None:
    web.cluster.marks.mkdir(parents=True, exist_ok=True)
    (web.cluster.marks / f"gate-{run_id}-{name}").touch()


def remember_page(page: object) -> None:
    """Mark this document: a reload would forget it (a live change must not need one)."""
    page.evaluate(f"{NO_RELOAD} = true")  # type: ignore[attr-defined]


def same_page(page: object) -> bool:
    return bool(page.evaluate(f"{NO_RELOAD} === true"))  # type: ignore[attr-defined]


def task_state(web: WebServer, run_id: str, task_id: str) -> str | None:
    with web.client() as c:
        body = c.get(f"/api/v1/dags/web_live/runs/{run_id}/status").json()
    return body["tasks"].get(task_id)


def row(page: object, label: str) -> object:
    return page.locator(f'#task-rows tr[data-instance="{label}"]')  # type: ignore[attr-defined]


def test_case_7_map_instances_appear_as_created_and_rows_keep_every_column(
    page: object, web: WebServer, run: tuple[str, str], tmp_path: Path
) -> None:
    run_id, url = run
    page.goto(url)  # type: ignore[attr-defined]
    remember_page(page)
    # the instances wait at their gate: they appear live, and the map's row is running
    for label in ("step[0]", "step[1]"):
        row(page, label).locator(".state-running").wait_for(timeout=LIVE_MS)  # type: ignore[attr-defined]
        assert (
            row(page, label)
            .locator("a")
            .get_attribute("href")
            .endswith(  # type: ignore[attr-defined]
                f"/tasks/step?map_index={label[5]}"
            )
        )
    row(page, "step").locator(".st .state-running").wait_for(timeout=LIVE_MS)  # type: ignore[attr-defined]
    # both drawings of the graph (left to right, top to bottom; the page's width shows one)
    assert page.locator('#run-graph g.node[data-task="step"].state-running').count() == 2  # type: ignore[attr-defined]
    assert same_page(page)
    shot(page, tmp_path, "live-map-running")
    # the gate opens: collect and hold run; rows the poll drew keep link, worker, try, dates
    open_gate(web, run_id, "map")
    row(page, "hold").locator(".state-running").wait_for(timeout=LIVE_MS)  # type: ignore[attr-defined]
    assert row(page, "step").locator(".st").inner_text() == "success"  # type: ignore[attr-defined]
    for label in ("step[0]", "step[1]", "collect"):
        cells = row(page, label)
        assert cells.locator(".state-success").count() == 1  # type: ignore[attr-defined]
        assert cells.locator("a[href*='/tasks/']").count() == 1  # type: ignore[attr-defined]
        assert cells.locator(".worker").inner_text() not in ("", "–")  # type: ignore[attr-defined]
        assert cells.locator(".try").inner_text() == "1"  # type: ignore[attr-defined]
        assert cells.locator(".started time[datetime]").count() == 1  # type: ignore[attr-defined]
    # the timeline follows too: a bar per started task run, the running one still growing
    bar = '#gantt .gantt-row:has(a[href$="/tasks/hold"]) .gantt-bar.running'
    page.locator(bar).wait_for(timeout=LIVE_MS)  # type: ignore[attr-defined]
    labels = page.locator("#gantt .gantt-label").all_inner_texts()  # type: ignore[attr-defined]
    assert {"step[0]", "step[1]", "collect", "hold"} <= set(labels)
    track = page.locator("#gantt .gantt-track").first.bounding_box()["width"]  # type: ignore[attr-defined]
    first = page.locator("#gantt .gantt-bar").first.bounding_box()  # type: ignore[attr-defined]
    assert 0 < first["width"] < track  # drawn to scale inside its track
    assert same_page(page)
    shot(page, tmp_path, "live-rows")


def test_case_7_the_task_page_follows_its_task_run_and_shows_log_lines_whole(
    page: object, web: WebServer, run: tuple[str, str], tmp_path: Path
) -> None:
    run_id, url = run
    open_gate(web, run_id, "map")
    wait_for(lambda: task_state(web, run_id, "hold"), 60.0, 0.1, "hold to start")
    page.goto(f"{url}/tasks/hold")  # type: ignore[attr-defined]
    remember_page(page)
    # the second try waits at its gate: the page shows it, and its log tail, without a reload
    logs = page.locator("pre#logs")  # type: ignore[attr-defined]
    logs.filter(has_text="try 2 waits for its gate").wait_for(timeout=LIVE_MS)
    assert page.inner_text("dl.facts dd") == "2"  # type: ignore[attr-defined]
    assert page.locator("h1 .state-running").count() == 1  # type: ignore[attr-defined]
    # a long line is there whole, wrapped inside its box; the toggle puts it on one line
    text = logs.inner_text()
    assert "a long log line " * 40 + " END-OF-THE-LONG-LINE" in text
    assert "the retry reason: the disk was full); retrying in" in text  # the worker's line
    width = "e => [e.scrollWidth, e.clientWidth]"
    scroll, client = logs.evaluate(width)
    assert scroll <= client, "wrapped lines stay inside the box"
    shot(page, tmp_path, "task-live-wrapped")
    page.click("#logs-wrap")  # type: ignore[attr-defined]
    scroll, client = logs.evaluate(width)
    assert scroll > client, "one line per line: the box scrolls sideways"
    assert page.get_attribute("#logs-wrap", "aria-pressed") == "false"  # type: ignore[attr-defined]
    shot(page, tmp_path, "task-live-unwrapped")
    # the gate opens: the page follows to success and the last log line
    open_gate(web, run_id, "hold")
    page.locator("h1 .state-success").wait_for(timeout=LIVE_MS)  # type: ignore[attr-defined]
    logs.filter(has_text="the gate opened").wait_for(timeout=LIVE_MS)
    assert page.locator("pre#logs").evaluate("e => getComputedStyle(e).whiteSpace") == "pre"  # type: ignore[attr-defined]
    assert same_page(page)
    shot(page, tmp_path, "task-live-done")
    page.click("#logs-wrap")  # type: ignore[attr-defined]  (back on, for the next test)
