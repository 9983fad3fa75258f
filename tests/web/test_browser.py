"""The web UI as a person uses it, in headless Chromium (Debian's, driven by Playwright) against
a real worker: log in, the DAG list, a DAG's graph and grid, trigger with conf and watch the run
finish, a failed task's traceback and logs, clear it and see it succeed, cancel a running run,
replay a dead letter. Screenshots go to the test's tmp folder, the run's artifacts
(tests/artifacts.py) and BEATFLOW_SCREENSHOTS_DIR when set (make screenshot)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from beatflow.runtime import runtime_of
from tests import artifacts
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
    artifacts.keep(path)
    chosen = os.environ.get("BEATFLOW_SCREENSHOTS_DIR")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(chosen) / path.name)


def wait_state(page: object, state: str) -> None:
    page.wait_for_selector(f"#run-state .state-{state}", timeout=WAIT_MS)  # type: ignore[attr-defined]


def open_raw_conf(page: object) -> None:
    """A DAG with params shows a form of fields; its raw JSON conf is one click away."""
    raw = page.locator("details.raw-conf:not([open]) summary")  # type: ignore[attr-defined]
    if raw.count():
        raw.click()


def trigger_from_page(page: object, web: WebServer, dag_id: str, conf: str) -> None:
    page.goto(f"{web.url}/dags/{dag_id}")  # type: ignore[attr-defined]
    open_raw_conf(page)
    page.fill("textarea[name=conf]", conf)  # type: ignore[attr-defined]
    page.click("form.raw >> text=Trigger run")  # type: ignore[attr-defined]
    page.wait_for_selector("#run-state")  # type: ignore[attr-defined]


def test_the_dag_list_graph_grid_and_a_run_triggered_with_conf(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    text = page.inner_text("main")  # type: ignore[attr-defined]
    assert "web_etl" in text and "every day at 02:30" in text
    broken = page.inner_text("section.broken")  # type: ignore[attr-defined]
    assert "dags/broken_web.py:3" in broken and str(Path.cwd().resolve()) not in broken
    shot(page, tmp_path, "dags")
    page.click("text=web_etl")  # type: ignore[attr-defined]
    open_raw_conf(page)
    page.fill("textarea[name=conf]", '{"rows": "five"}')  # type: ignore[attr-defined]
    page.click("form.raw >> text=Trigger run")  # type: ignore[attr-defined]
    assert '"rows" must be int' in page.inner_text("ul.error")  # type: ignore[attr-defined]
    page.fill("textarea[name=conf]", '{"rows": 5}')  # type: ignore[attr-defined]
    page.click("form.raw >> text=Trigger run")  # type: ignore[attr-defined]
    wait_state(page, "success")  # live updates, then a reload when it ends
    assert '"rows": 5' in page.inner_text("dl.facts")  # type: ignore[attr-defined]
    assert page.locator("#task-rows .state-success").count() == 3  # type: ignore[attr-defined]
    shot(page, tmp_path, "run")
    page.click(".crumbs a")  # type: ignore[attr-defined]
    assert page.locator("svg.graph.lr g.node.state-success").count() == 3  # type: ignore[attr-defined]
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
    page.fill("#clear-reason", "publish fixed")  # type: ignore[attr-defined]
    page.click("#confirm-clear")  # type: ignore[attr-defined]
    wait_state(page, "success")
    # the second try overall, the first of the round the clear started (retries=0)
    tried = page.locator("#task-rows tr[data-instance=publish] .try").inner_text()  # type: ignore[attr-defined]
    assert tried == "2 (1 since clear)"


def test_cancel_asks_for_a_reason_and_reports_a_task_left_running_or_terminates_it(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    trigger_from_page(page, web, "web_slow", '{"seconds": 20}')
    page.wait_for_selector("#task-rows tr[data-instance=slow] .state-running")  # type: ignore[attr-defined]
    page.click("#cancel-run")  # type: ignore[attr-defined]
    page.click("#confirm-cancel")  # type: ignore[attr-defined]
    # no reason: the browser keeps the form open and nothing is posted
    assert page.evaluate("document.querySelector('#cancel-reason').validity.valueMissing")  # type: ignore[attr-defined]
    assert page.locator("#run-state .state-running").count() == 1  # type: ignore[attr-defined]
    page.fill("#cancel-reason", "not today")  # type: ignore[attr-defined]
    shot(page, tmp_path, "cancel-confirm")
    page.click("#confirm-cancel")  # type: ignore[attr-defined]
    wait_state(page, "cancelled")
    note = page.inner_text("#still-running")  # type: ignore[attr-defined]
    assert "slow" in note and "may still be running" in note and "terminate" in note
    assert "not today" in page.inner_text("#audit")  # type: ignore[attr-defined]
    shot(page, tmp_path, "cancel-left-running")

    trigger_from_page(page, web, "web_slow", '{"seconds": 60}')
    page.wait_for_selector("#task-rows tr[data-instance=slow] .state-running")  # type: ignore[attr-defined]
    page.click("#cancel-run")  # type: ignore[attr-defined]
    page.fill("#cancel-reason", "stop it now")  # type: ignore[attr-defined]
    page.check("#cancel-terminate")  # type: ignore[attr-defined]
    page.click("#confirm-cancel")  # type: ignore[attr-defined]
    wait_state(page, "cancelled")
    assert page.locator("#still-running").count() == 0  # type: ignore[attr-defined]
    assert "(terminate)" in page.inner_text("#audit")  # type: ignore[attr-defined]
    run_id = page.url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
    with web.client() as c:
        audit = c.get("/api/v1/audit", params={"run_id": unquote(run_id)}).json()
    cancel = next(a for a in audit["audit"] if a["action"] == "cancel")
    assert cancel["detail"]["terminate"] is True and cancel["detail"]["reason"] == "stop it now"

    # a mark asks for a reason too, and the run says who marked it and why
    page.click("#mark-run")  # type: ignore[attr-defined]
    page.select_option("#mark-state", "success")  # type: ignore[attr-defined]
    page.fill("#mark-reason", "checked the output by hand")  # type: ignore[attr-defined]
    page.click("#confirm-mark")  # type: ignore[attr-defined]
    wait_state(page, "success")
    assert page.inner_text("#marked-note").startswith(  # type: ignore[attr-defined]
        f"marked success by user:{USER}: checked the output by hand"
    )
    shot(page, tmp_path, "marked")


def test_a_dead_letter_is_replayed_from_its_page_with_a_reason(
    page: object, web: WebServer
) -> None:
    with web.client() as c:
        run = c.post("/api/v1/dags/web_dlq/runs", json={}).json()
    assert web.wait_run("web_dlq", run["run_id"])["state"] == "failed"
    page.goto(web.url + "/dead-letters")  # type: ignore[attr-defined]
    row = page.locator("tr", has_text=run["run_id"])  # type: ignore[attr-defined]
    assert "doomed until replayed" in row.inner_text()
    row.locator("summary.button", has_text="Replay").click()
    row.locator("input[name=reason]").fill("the bug is fixed")
    row.locator("button", has_text="Replay dead letter").click()
    wait_state(page, "success")
    assert "the bug is fixed" in page.inner_text("#audit")  # type: ignore[attr-defined]


def test_the_dag_page_shows_every_run_in_the_grid(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    page.goto(web.url + "/dags/web_etl")  # type: ignore[attr-defined]
    runs = page.locator("table.grid thead a.sq").count()  # type: ignore[attr-defined]
    assert runs >= 2
    dates = page.locator("table.grid tr.dates time")  # type: ignore[attr-defined]
    assert dates.count() == runs  # each column dated, short, the whole date in its title
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d", dates.first.inner_text())
    assert dates.first.get_attribute("title").endswith("UTC")
    bars = page.locator("table.grid tr.durations rect.dbar")  # type: ignore[attr-defined]
    heights = [b.bounding_box()["height"] for b in bars.all()]
    assert len(heights) == runs and max(heights) == 44  # durations across runs, to scale
    assert all(h >= 2 for h in heights)  # every finished run has a visible bar
    # the README's picture: no path of the machine the test ran on is shown
    shown = page.inner_text("main")  # type: ignore[attr-defined]
    assert str(Path(__file__).resolve().parents[2]) not in shown
    assert "dags/web_ui.py:" in shown
    assert page.locator("table.grid tbody tr").count() == 3  # type: ignore[attr-defined]
    shot(page, tmp_path, "web-ui")


def test_errors_are_html_pages_with_the_way_back_and_the_api_keeps_json(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    # an unknown DAG
    response = page.goto(web.url + "/dags/no_such_dag")  # type: ignore[attr-defined]
    assert response.status == 404 and "text/html" in response.headers["content-type"]
    assert "no_such_dag" in page.inner_text("#error-message")  # type: ignore[attr-defined]
    assert page.locator(".way-back a[href='/']").count() == 1  # type: ignore[attr-defined]
    shot(page, tmp_path, "error-404")
    # a reload of the trigger form's address after a bad conf: a GET of a POST-only route
    trigger_from_page_error(page, web)
    response = page.goto(web.url + "/dags/web_etl/trigger")  # type: ignore[attr-defined]
    assert response.status == 405 and "text/html" in response.headers["content-type"]
    shot(page, tmp_path, "error-405")
    page.click(".way-back a:text-is('DAG web_etl')")  # type: ignore[attr-defined]
    page.wait_for_selector("form.params")  # type: ignore[attr-defined]
    # a verb from a second tab that no longer applies: 409, with the way back to the run
    with web.client() as c:
        run = c.post("/api/v1/dags/web_etl/runs", json={}).json()
    assert web.wait_run("web_etl", run["run_id"])["state"] == "success"
    run_url = f"{web.url}/dags/web_etl/runs/{run['run_id']}"
    second = page.context.new_page()  # type: ignore[attr-defined]
    for tab in (page, second):
        tab.goto(run_url)  # type: ignore[attr-defined]
        tab.click("#mark-run")  # type: ignore[attr-defined]
        tab.select_option("#mark-state", "failed")  # type: ignore[attr-defined]
        tab.fill("#mark-reason", "bad output")  # type: ignore[attr-defined]
    page.click("#confirm-mark")  # type: ignore[attr-defined]
    wait_state(page, "failed")
    with second.expect_response(lambda r: r.request.method == "POST") as posted:
        second.click("#confirm-mark")
    assert posted.value.status == 409
    second.wait_for_selector("#error-message")
    assert "failed already" in second.inner_text("#error-message")
    shot(second, tmp_path, "error-409")
    second.click(f".way-back a:text-is('run {run['run_id']}')")
    second.wait_for_selector("#run-state .state-failed")
    second.close()
    # the API answers JSON, whatever the client accepts
    with web.client() as c:
        api = c.get("/api/v1/dags/no_such_dag", headers={"Accept": "text/html"})
    assert api.status_code == 404 and api.json()["status"] == 404


def trigger_from_page_error(page: object, web: WebServer) -> None:
    page.goto(f"{web.url}/dags/web_etl")  # type: ignore[attr-defined]
    open_raw_conf(page)
    page.fill("textarea[name=conf]", '{"rows": "five"}')  # type: ignore[attr-defined]
    page.click("form.raw >> text=Trigger run")  # type: ignore[attr-defined]
    assert '"rows" must be int' in page.inner_text("ul.error")  # type: ignore[attr-defined]


TEXT = "café ✓ a<b & c"


def stored_run(web: WebServer, run_id: str, conf: dict[str, object]) -> str:
    """A finished run of web_etl with a conf as it was stored (by an older version of the DAG,
    say): the page shows what is stored."""
    store = runtime_of(web.cluster.app).store
    store.create_dag_run("web_etl", run_id, conf=conf)
    store.finish_dag_run("web_etl", run_id, "failed")
    return f"{web.url}/dags/web_etl/runs/{run_id}"


def test_conf_is_shown_as_written_and_a_large_conf_stays_in_its_box(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    page.goto(stored_run(web, "text-as-written", {"note": TEXT}))  # type: ignore[attr-defined]
    facts = page.inner_text("dl.facts")  # type: ignore[attr-defined]
    assert TEXT in facts and "\\u" not in facts
    assert page.locator("dl.facts b").count() == 0  # type: ignore[attr-defined]
    shot(page, tmp_path, "conf-as-written")
    page.goto(stored_run(web, "large-conf", {"blob": "x" * 60_000}))  # type: ignore[attr-defined]
    width = page.evaluate("document.documentElement.scrollWidth")  # type: ignore[attr-defined]
    assert width <= 1280, f"the page is {width} px wide"
    box = page.locator("#run-conf").bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["height"] <= 400
    shot(page, tmp_path, "conf-large")


def test_runs_filter_by_dag_task_rows_keep_their_order_and_dates_are_written_one_way(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    with web.client() as c:
        for dag_id in ("web_etl", "web_slow"):
            conf = {"seconds": 0.1} if dag_id == "web_slow" else {}
            run = c.post(f"/api/v1/dags/{dag_id}/runs", json={"conf": conf}).json()
            web.wait_run(dag_id, run["run_id"])
    page.goto(web.url + "/runs?dag_id=web_slow")  # type: ignore[attr-defined]
    dags = page.eval_on_selector_all(  # type: ignore[attr-defined]
        "table.runs tbody td:first-child a", "links => links.map(a => a.textContent)"
    )
    assert dags and set(dags) == {"web_slow"}
    page.goto(web.url + "/runs?dag_id=web_etl&state=success")  # type: ignore[attr-defined]
    states = page.eval_on_selector_all("table.runs .badge", "b => b.map(x => x.textContent)")  # type: ignore[attr-defined]
    assert states and set(states) == {"success"}
    shot(page, tmp_path, "runs-filtered")
    page.click("table.runs a[href*='/runs/']")  # type: ignore[attr-defined]
    order = page.eval_on_selector_all(  # type: ignore[attr-defined]
        "#task-rows tr", "rows => rows.map(r => r.dataset.instance)"
    )
    assert order == ["extract", "total", "publish"]
    dates = page.eval_on_selector_all("main time", "ts => ts.map(t => t.textContent)")  # type: ignore[attr-defined]
    assert dates and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", d) for d in dates)
    page.click("#tz-toggle")  # type: ignore[attr-defined]
    local = page.inner_text("main time")  # type: ignore[attr-defined]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+-]\d\d:\d\d", local)
    page.click("#tz-toggle")  # type: ignore[attr-defined]


def test_pages_fit_390_px_have_a_dark_mode_and_a_favicon(
    browser: object, page: object, web: WebServer, tmp_path: Path
) -> None:
    large = stored_run(web, "large-conf-narrow", {"blob": "y" * 60_000, "note": TEXT})
    cookies = page.context.cookies()  # type: ignore[attr-defined]
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 390, "height": 844}, color_scheme="dark"
    )
    context.add_cookies(cookies)
    narrow = context.new_page()
    with web.client() as c:
        letters = c.get("/api/v1/dead-letters").json()["dead_letters"]
        task = next(
            f"/dags/web_etl/runs/{r['run_id']}/tasks/extract"
            for r in c.get("/api/v1/runs", params={"dag_id": "web_etl", "state": "success"}).json()[
                "runs"
            ]
        )
    paths = ["/", "/dags/web_etl", "/runs", "/dead-letters", task, "/dags/no_such_dag"]
    for i, url in enumerate([web.url + p for p in paths] + [large]):
        narrow.goto(url)
        width = narrow.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{url} is {width} px wide at a 390 px viewport"
        shot(narrow, tmp_path, f"narrow-dark-{i}")
    assert letters is not None
    background = narrow.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(247, 248, 250)", "no dark mode"
    icon = narrow.get_attribute("link[rel=icon]", "href")
    assert icon == "/static/favicon.svg"
    context.close()
    favicon = httpx.get(web.url + icon)  # logged out: the login page shows it too
    assert favicon.status_code == 200 and favicon.headers["content-type"].startswith(
        "image/svg+xml"
    )


def test_skipped_tasks_are_shown_as_skipped_with_their_reason(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    with web.client() as c:
        run = c.post("/api/v1/dags/web_branch/runs", json={}).json()
        final = web.wait_run("web_branch", run["run_id"])
        assert final["state"] == "success"
        tasks = {t["task_id"]: t for t in final["tasks"]}  # type: ignore[attr-defined]
        assert {t: tasks[t]["state"] for t in tasks} == {
            "choose": "success",
            "taken": "success",
            "not_taken": "skipped",
            "nothing_to_do": "skipped",
        }
        base = f"/api/v1/dags/web_branch/runs/{run['run_id']}/tasks"
        assert c.get(f"{base}/nothing_to_do").json()["error"] == "nothing to do today"
        assert c.get(f"{base}/not_taken").json()["error"] == "branch choose followed taken"
        shown = c.get("/api/v1/dags/web_branch").json()["tasks"]
        assert {t["task_id"]: t["control"] for t in shown}["choose"] == "branch"
        grid = c.get("/api/v1/dags/web_branch/grid").json()
        assert {r["task_id"]: r["states"][-1] for r in grid["tasks"]}["not_taken"] == "skipped"
    page.goto(f"{web.url}/dags/web_branch/runs/{run['run_id']}")  # type: ignore[attr-defined]
    wait_state(page, "success")
    node = page.locator('#run-graph svg.lr g.node.state-skipped[data-task="not_taken"] rect')  # type: ignore[attr-defined]
    done = page.locator('#run-graph svg.lr g.node.state-success[data-task="taken"] rect')  # type: ignore[attr-defined]
    style = "(r, p) => getComputedStyle(r).getPropertyValue(p)"
    assert node.evaluate(style, "stroke-dasharray") not in ("", "none")  # dashed: not run
    assert node.evaluate(style, "fill") != done.evaluate(style, "fill")
    badge = page.locator('tr[data-instance="not_taken"] .badge.state-skipped')  # type: ignore[attr-defined]
    assert badge.inner_text() == "skipped"
    colour = (
        "s => { const e = document.createElement('span'); e.className = `badge state-${s}`;"
        " document.body.append(e); const c = getComputedStyle(e).backgroundColor; e.remove();"
        " return c; }"
    )
    others = {page.evaluate(colour, s) for s in ("queued", "none", "success", "cancelled")}  # type: ignore[attr-defined]
    assert page.evaluate(colour, "skipped") not in others  # type: ignore[attr-defined]
    shot(page, tmp_path, "run-skipped")
    page.goto(f"{web.url}/dags/web_branch/runs/{run['run_id']}/tasks/nothing_to_do")  # type: ignore[attr-defined]
    assert page.inner_text("#task-skip-reason") == "nothing to do today"  # type: ignore[attr-defined]
    assert page.locator("#task-error").count() == 0  # type: ignore[attr-defined]


def test_the_trigger_form_built_from_params_checks_each_field_and_keeps_the_input(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    pg.goto(f"{web.url}/dags/web_groups")
    batch = "form.params input[name='param.batch']"
    assert pg.input_value(batch) == "10"  # the default, filled in
    assert pg.input_value("form.params select[name='param.region']") == '"eu"'
    assert "rows" in pg.inner_text(".field[data-param=batch] .help")
    # the browser refuses a value out of bounds, next to the field, and posts nothing
    pg.fill(batch, "500")
    pg.click("form.params >> text=Trigger run")
    assert pg.inner_text(".field[data-param=batch] .field-error").strip() != ""
    assert pg.url.endswith("/dags/web_groups")
    # the server checks again (a client that skips the browser's checks): errors by the field
    pg.eval_on_selector("form.params", "f => { f.noValidate = true; }")
    pg.fill("form.params input[name='param.day']", "yesterday")
    pg.click("form.params >> text=Trigger run")
    assert "must be at most 100, got 500" in pg.inner_text(".field[data-param=batch] .field-error")
    assert "must match the pattern" in pg.inner_text(".field[data-param=day] .field-error")
    assert pg.input_value(batch) == "500"  # the input is kept
    assert pg.input_value("form.params input[name='param.day']") == "yesterday"
    assert pg.inner_text(".field[data-param=region] .field-error").strip() == ""
    shot(page, tmp_path, "params-form-errors")
    pg.fill(batch, "20")
    pg.fill("form.params input[name='param.day']", "2026-12-06")
    pg.select_option("form.params select[name='param.region']", '"us"')
    pg.check("form.params input[name='param.dry_run']")
    pg.click("form.params >> text=Trigger run")
    wait_state(page, "success")
    facts = pg.inner_text("dl.facts")
    assert '"batch": 20' in facts and '"region": "us"' in facts and '"dry_run": true' in facts


def test_task_groups_fold_into_one_node_in_the_graph_and_head_their_rows_in_the_grid(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    trigger_from_page(page, web, "web_groups", "{}")
    wait_state(page, "success")
    pg.goto(f"{web.url}/dags/web_groups")
    # 1280 px wide: the left-to-right drawing (the top-to-bottom one is there, hidden)
    assert pg.locator("svg.graph.lr g.group[data-group=extract]").count() == 1
    assert pg.locator("svg.graph.lr g.node[data-task='extract.pull']").count() == 1
    assert pg.locator("table.grid tr.group-row[data-group=extract]").count() == 1
    grid = [
        pg.inner_text(f"table.grid tr[data-task='{t}'] th") for t in ("extract.pull", "load.write")
    ]
    assert grid == ["pull", "write"]
    pg.click("svg.graph.lr g.group[data-group=extract] a.group-toggle")
    pg.wait_for_selector("svg.graph.lr g.group-node[data-group=extract]")
    assert pg.locator("svg.graph.lr g.node[data-task='extract.pull']").count() == 0
    assert pg.locator("svg.graph.lr g.group-node.state-success[data-group=extract]").count() == 1
    assert pg.locator("svg.graph.lr g.node[data-task='load.write']").count() == 1
    shot(page, tmp_path, "group-collapsed")
    pg.click("svg.graph.lr g.group-node[data-group=extract]")  # open it again
    pg.wait_for_selector("svg.graph.lr g.node[data-task='extract.pull']")
    pg.click("#collapse-all")
    pg.wait_for_selector("svg.graph.lr g.group-node[data-group=load]")
    assert pg.locator("svg.graph.lr g.node").count() == 2
