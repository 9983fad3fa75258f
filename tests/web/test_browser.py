"""The web UI as a person uses it, in headless Chromium (Debian's, driven by Playwright) against
a real worker: log in, the DAG list, a DAG's graph and grid, trigger with conf and watch the run
finish, a failed task's traceback and logs, clear it and see it succeed, cancel a running run,
replay a dead letter. Screenshots go to the test's tmp folder (and BEATFLOW_SCREENSHOTS_DIR)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.conftest import PASSWORD, USER, WebServer

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{CHROMIUM} is required in CI (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: object, web: WebServer, tmp_path: Path) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    pg.goto(web.url + "/")
    assert "/login" in pg.url  # nothing without a session
    pg.fill("input[name=username]", USER)
    pg.fill("input[name=password]", PASSWORD)
    pg.click("button[type=submit]")
    pg.wait_for_selector("table.dags")
    yield pg
    context.close()


def shot(page: object, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    keep = os.environ.get("BEATFLOW_SCREENSHOTS_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)


def wait_state(page: object, state: str) -> None:
    page.wait_for_selector(f"#run-state .state-{state}", timeout=WAIT_MS)  # type: ignore[attr-defined]


def trigger_from_page(page: object, web: WebServer, dag_id: str, conf: str) -> None:
    page.goto(f"{web.url}/dags/{dag_id}")  # type: ignore[attr-defined]
    page.fill("textarea[name=conf]", conf)  # type: ignore[attr-defined]
    page.click("text=Trigger run")  # type: ignore[attr-defined]
    page.wait_for_selector("#run-state")  # type: ignore[attr-defined]


def test_the_dag_list_graph_grid_and_a_run_triggered_with_conf(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    text = page.inner_text("main")  # type: ignore[attr-defined]
    assert "web_etl" in text and "every day at 02:30" in text
    assert "broken_web.py" in page.inner_text("section.broken")  # type: ignore[attr-defined]
    shot(page, tmp_path, "dags")
    page.click("text=web_etl")  # type: ignore[attr-defined]
    page.fill("textarea[name=conf]", '{"rows": "five"}')  # type: ignore[attr-defined]
    page.click("text=Trigger run")  # type: ignore[attr-defined]
    assert '"rows" must be int' in page.inner_text("ul.error")  # type: ignore[attr-defined]
    page.fill("textarea[name=conf]", '{"rows": 5}')  # type: ignore[attr-defined]
    page.click("text=Trigger run")  # type: ignore[attr-defined]
    wait_state(page, "success")  # live updates, then a reload when it ends
    assert '"rows": 5' in page.inner_text("dl.facts")  # type: ignore[attr-defined]
    assert page.locator("#task-rows .state-success").count() == 3  # type: ignore[attr-defined]
    shot(page, tmp_path, "run")
    page.click(".crumbs a")  # type: ignore[attr-defined]
    assert page.locator("svg.graph g.node.state-success").count() == 3  # type: ignore[attr-defined]
    assert page.locator("table.grid td a.state-success").count() >= 3  # type: ignore[attr-defined]
    shot(page, tmp_path, "dag")


def test_a_failed_task_shows_traceback_and_logs_and_a_clear_makes_it_succeed(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    trigger_from_page(page, web, "web_etl", '{"fail_first": true}')
    wait_state(page, "failed")
    page.click("#task-rows a:text-is('publish')")  # type: ignore[attr-defined]
    assert "RuntimeError: the first publish fails on purpose" in page.inner_text("#traceback")  # type: ignore[attr-defined]
    # the worker writes logs a moment after the task ends: reload until they are there
    logs = page.inner_text("#logs")  # type: ignore[attr-defined]
    for _ in range(50):
        if "publish call 1" in logs:
            break
        page.reload()  # type: ignore[attr-defined]
        logs = page.inner_text("#logs")  # type: ignore[attr-defined]
    assert "publish call 1 with total 3" in logs
    assert page.get_attribute("#flower-link", "href").endswith(
        "/task/" + page.inner_text("#flower-link").split()[0]
    )  # type: ignore[attr-defined, union-attr]
    shot(page, tmp_path, "task")
    page.click("#clear-task")  # type: ignore[attr-defined]
    wait_state(page, "success")
    assert page.locator("#task-rows tr[data-instance=publish] .try").inner_text() == "2"  # type: ignore[attr-defined]


def test_a_running_run_is_cancelled_from_its_page(page: object, web: WebServer) -> None:
    trigger_from_page(page, web, "web_slow", '{"seconds": 60}')
    page.wait_for_selector("#task-rows tr[data-instance=slow] .state-running")  # type: ignore[attr-defined]
    page.on("dialog", lambda dialog: dialog.accept())  # type: ignore[attr-defined]
    page.fill("input[name=reason]", "not today")  # type: ignore[attr-defined]
    page.click("#cancel-run")  # type: ignore[attr-defined]
    wait_state(page, "cancelled")


def test_a_dead_letter_is_replayed_from_its_page(page: object, web: WebServer) -> None:
    with web.client() as c:
        run = c.post("/api/v1/dags/web_dlq/runs", json={}).json()
    assert web.wait_run("web_dlq", run["run_id"])["state"] == "failed"
    page.goto(web.url + "/dead-letters")  # type: ignore[attr-defined]
    row = page.locator("tr", has_text=run["run_id"])  # type: ignore[attr-defined]
    assert "doomed until replayed" in row.inner_text()
    row.locator("button", has_text="Replay").click()
    wait_state(page, "success")


def test_the_dag_page_shows_every_run_in_the_grid(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    page.goto(web.url + "/dags/web_etl")  # type: ignore[attr-defined]
    runs = page.locator("table.grid thead a.sq").count()  # type: ignore[attr-defined]
    assert runs >= 2
    assert page.locator("table.grid tbody tr").count() == 3  # type: ignore[attr-defined]
    shot(page, tmp_path, "web-ui")
