"""Issue 45's numbered cases, each walked as an operator would in headless Chromium (Debian's,
driven by Playwright) against a real stack: a worker process, Redis, PostgreSQL and the web app,
on a copy of tests/web/dags that a case adds DAG files to while it runs. Each test asserts the
fixed behaviour and keeps a screenshot of its end state in the run's artifacts
(tests/artifacts.py: BEATFLOW_TEST_ARTIFACTS, default .ci/artifacts/screenshots/).

| case | what went wrong | walked by |
|---|---|---|
| 1 | a new DAG never reached the workers; its run stayed running | test_case_1_… |
| 2 | cancel did not stop the task; no terminate; a misleading log | test_case_2_… |
| 3 | a conf nested 5,000 deep answered a plain 500 | test_case_3_… |
| 4 | clear and replay ignored retries | test_browser_verbs.py::test_case_4_… |
| 5 | a stale dead letter undid a mark | test_browser_verbs.py::test_case_5_… |
| 6 | a session survived logout | test_case_6_… |
| 7 | the live run and task views were incomplete | test_live_view.py::test_case_7_… (two) |
| 8 | raw JSON error pages; verbs without confirmation or reason | test_case_8_… |
| 9 | text, filters, row order, dates, 390 px, dark mode, favicon | test_case_9_… |

Case 9's graph layout (width, edges under nodes) is tests/web/test_browser_graph.py's."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

from tests import services
from tests.cluster import Cluster, own_cluster
from tests.procs import wait_for
from tests.web.case_dags import LATE_DAG, NEVER_DAG, ROWS_DAG, WORKER_SIDE
from tests.web.conftest import DAGS, USER, WebServer
from tests.web.test_browser import browser, open_raw_conf, page, shot, wait_state

pytestmark = pytest.mark.slow
__all__ = ["browser", "page"]  # the fixtures, shared with the other browser tests

TEXT = "café ✓ a<b & c"
UTC_DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"  # the one way dates are written


@pytest.fixture(scope="module")
def dags_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cases") / "dags"
    shutil.copytree(DAGS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "case_rows.py").write_text(ROWS_DAG)
    return folder


@pytest.fixture(scope="module")
def web_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
    dags_folder: Path,
) -> Iterator[Cluster]:
    """The module's stack (the conftest's ``web`` serves it): the web app looks at its dags
    folder every second, as the beat does every BEATFLOW_SCHEDULE_SYNC_INTERVAL."""
    env = {"BEATFLOW_SCHEDULE_SYNC_INTERVAL": "1", WORKER_SIDE: "1"}
    tmp = tmp_path_factory.mktemp("cases-stack")
    with own_cluster(redis_server, postgres_server, tmp, dags=dags_folder, env=env) as c:
        yield c


def trigger(pg: Any, web: WebServer, dag_id: str, conf: str) -> str:
    """Trigger ``dag_id`` from its page's raw conf form; the run's id (its page is open)."""
    pg.goto(f"{web.url}/dags/{dag_id}")
    open_raw_conf(pg)
    pg.fill("form.raw textarea[name=conf]", conf)
    pg.click("form.raw >> text=Trigger run")
    pg.wait_for_selector("#run-state, ul.error")
    assert pg.locator("#run-state").count(), pg.inner_text("ul.error")
    return unquote(pg.url.rsplit("/", 1)[1])


def final_state(pg: Any) -> str:
    """The run's state once its page stopped following it (the live poll reloads at the end)."""
    pg.wait_for_selector("#live:not([data-live-run])", state="attached")
    return str(pg.inner_text("#run-state .badge"))


def shown_after_reloads(pg: Any, url: str, selector: str, what: str) -> None:
    """Reload ``url`` until ``selector`` is on it, as an operator waiting for a change would."""

    def shown() -> bool:
        pg.goto(url)
        return bool(pg.locator(selector).count())

    wait_for(shown, 60.0, 0.2, what)


def test_case_1_a_dag_added_while_the_stack_runs_is_run_from_the_ui_or_fails_with_why(
    page: Any, web: WebServer, dags_folder: Path, tmp_path: Path
) -> None:
    (dags_folder / "case_late.py").write_text(LATE_DAG)
    new = "table.dags a:text-is('case_late')"
    shown_after_reloads(page, web.url + "/?q=case_late", new, "the new DAG on the DAG list")
    trigger(page, web, "case_late", "{}")
    assert final_state(page) == "success", web.cluster.log_tail()
    assert page.locator("#task-rows .state-success").count() == 2
    assert "loaded new DAGs case_late" in web.cluster.log()  # the same worker, no restart
    shot(page, tmp_path, "case-1-new-dag-success")

    # a DAG the worker cannot load: the run ends failed at once, the page says why in full
    (dags_folder / "case_never.py").write_text(NEVER_DAG)
    never = "table.dags a:text-is('case_never')"
    shown_after_reloads(page, web.url + "/?q=case_never", never, "case_never on the DAG list")
    trigger(page, web, "case_never", "{}")
    assert final_state(page) == "failed"
    error = page.inner_text("#task-rows tr[data-instance=only] .err")
    for part in ('DAG "case_never" is not loaded on worker', "case_never.py", "END-OF-REASON"):
        assert part in error, error
    shot(page, tmp_path, "case-1-not-loaded-failed")


def slow_run(pg: Any, web: WebServer, seconds: float) -> str:
    run_id = trigger(pg, web, "web_slow", json.dumps({"seconds": seconds}))
    pg.wait_for_selector("#task-rows tr[data-instance=slow] .state-running")
    return run_id


def cancel(pg: Any, reason: str, *, terminate: bool) -> None:
    pg.click("#cancel-run")
    pg.fill("#cancel-reason", reason)
    if terminate:
        pg.check("#cancel-terminate")
    pg.click("#confirm-cancel")
    wait_state(pg, "cancelled")


def active_tasks(c: Cluster) -> set[str]:
    active = c.app.control.inspect(timeout=2.0).active() or {}
    return {t["id"] for tasks in active.values() for t in tasks}


def test_case_2_cancel_offers_terminate_which_stops_the_task_and_nothing_says_taken_over(
    page: Any, web: WebServer, tmp_path: Path
) -> None:
    # without terminate: the page names the task left running; the worker says why it stops
    run_id = slow_run(page, web, 8.0)
    cancel(page, "not today", terminate=False)
    note = page.inner_text("#still-running")
    assert "slow" in note and "may still be running" in note and "terminate" in note
    key = f"web_slow/{run_id}/slow"
    returned = re.compile(rf"task run {re.escape(key)}: .*stopping without recording success")
    wait_for(lambda: returned.search(web.cluster.log()), 60.0, 0.2, "the task to return")
    said = [line for line in web.cluster.log().splitlines() if key in line]
    assert not [line for line in said if "taken over" in line], said
    ended = "it ended meanwhile as cancelled (cancelled by user:admin: not today)"
    for moment in ("lease on task run", "stopping without recording"):  # renewal, return
        assert any(moment in line and ended in line for line in said), said
    shot(page, tmp_path, "case-2-cancelled-left-running")

    # with terminate: the task stops on its worker long before its 60 s are up
    run_id = slow_run(page, web, 60.0)
    [slow] = web.cluster.store.get_task_runs("web_slow", run_id)
    assert slow.celery_task_id in active_tasks(web.cluster)
    cancel(page, "stop it now", terminate=True)
    assert page.locator("#still-running").count() == 0
    assert "(terminate)" in page.inner_text("#audit")
    wait_for(lambda: slow.celery_task_id not in active_tasks(web.cluster), 30.0, 0.2, "a stop")
    shot(page, tmp_path, "case-2-cancelled-terminated")


def test_case_3_a_conf_nested_5000_deep_is_refused_with_the_limit_by_form_and_api(
    page: Any, web: WebServer, tmp_path: Path
) -> None:
    deep = "[" * 5000 + "]" * 5000  # ~10 KB
    page.goto(f"{web.url}/dags/web_etl")
    open_raw_conf(page)
    page.fill("form.raw textarea[name=conf]", deep)
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.click("form.raw >> text=Trigger run")
    assert posted.value.status == 400
    assert "text/html" in posted.value.headers["content-type"]
    refused = page.inner_text("form.raw ul.error")
    assert "5000 levels deep" in refused and "over the limit of 64 levels" in refused, refused
    shot(page, tmp_path, "case-3-deep-conf-refused")
    # the API, from the same session (a script on the page)
    csrf = page.get_attribute("form.raw input[name=csrf_token]", "value")
    status, body = page.evaluate(
        """async ([deep, csrf]) => {
            const r = await fetch("/api/v1/dags/web_etl/runs", {method: "POST",
                headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
                body: '{"conf": {"a": ' + deep + '}}'});
            return [r.status, await r.json()];
        }""",
        [deep, csrf],
    )
    assert status == 400 and "over the limit of 64 levels" in json.dumps(body), body
    with web.client() as c:
        assert c.get("/api/v1/runs", params={"dag_id": "web_etl"}).json()["runs"] == []


def test_case_6_the_session_cookie_from_before_logout_is_refused_after_it(
    browser: Any, page: Any, web: WebServer, tmp_path: Path
) -> None:
    csrf = page.get_attribute("form.logout input[name=csrf_token]", "value")
    copied = browser.new_context()  # the cookie, copied before logout (another browser)
    copied.add_cookies(page.context.cookies())
    assert copied.request.get(web.url + "/api/v1/dags").status == 200
    page.click("form.logout button[type=submit]")
    page.wait_for_url("**/login*")
    shot(page, tmp_path, "case-6-logged-out")
    assert copied.request.get(web.url + "/api/v1/dags").status == 401
    headers = {"X-CSRF-Token": csrf, "Origin": web.url}
    pause = copied.request.post(web.url + "/api/v1/dags/web_etl/pause", headers=headers)
    assert pause.status == 401
    old = copied.new_page()
    old.goto(web.url + "/dags/web_etl")
    assert "/login" in old.url
    shot(old, tmp_path, "case-6-old-cookie-to-login")
    copied.close()
    with web.client() as c:
        assert c.get("/api/v1/dags/web_etl").json()["paused"] is False


def dlq_run_failed(pg: Any, web: WebServer) -> str:
    run_id = trigger(pg, web, "web_dlq", "{}")
    assert final_state(pg) == "failed"
    return run_id


def refused_without_reason(pg: Any, confirm: str, reason: str) -> None:
    """A verb's form posts nothing without a reason: the browser keeps it open."""
    url = pg.url
    pg.click(confirm)
    assert pg.url == url and pg.locator(reason).count() == 1, "posted without a reason"
    assert pg.evaluate(f"document.querySelector('{reason}').validity.valueMissing")


def test_case_8_error_pages_are_html_with_the_way_back_and_each_verb_asks_for_a_reason(
    page: Any, web: WebServer, tmp_path: Path
) -> None:
    response = page.goto(web.url + "/dags/no_such_dag")
    assert response.status == 404 and "text/html" in response.headers["content-type"]
    assert "no_such_dag" in page.inner_text("#error-message")
    assert page.locator(".way-back a[href='/']").count() == 1
    shot(page, tmp_path, "case-8-404")
    # a reload of the trigger's address after a bad conf
    page.goto(f"{web.url}/dags/web_etl")
    open_raw_conf(page)
    page.fill("form.raw textarea[name=conf]", '{"rows": "five"}')
    page.click("form.raw >> text=Trigger run")
    assert '"rows" must be int' in page.inner_text("ul.error")
    assert page.url.endswith("/dags/web_etl/trigger")
    response = page.goto(page.url)  # the address bar's Enter: a GET of a POST-only route
    assert response.status == 405 and "text/html" in response.headers["content-type"]
    page.click(".way-back a:text-is('DAG web_etl')")
    page.wait_for_selector("form.params")

    # replay, from the dead letters, asks for a reason
    run_id = dlq_run_failed(page, web)
    page.goto(web.url + "/dead-letters")
    row = page.locator("tr", has_text=run_id)
    row.locator("summary.button", has_text="Replay").click()
    letter = row.get_attribute("data-letter")
    refused_without_reason(page, f"tr[data-letter='{letter}'] button", f"#replay-reason-{letter}")
    row.locator("input[name=reason]").fill("the bug is fixed")
    row.locator("button", has_text="Replay dead letter").click()
    assert final_state(page) == "success"
    assert "the bug is fixed" in page.inner_text("#audit")

    # clear asks for a reason; then a mark from two tabs: the second is told why, in a page
    run_id = dlq_run_failed(page, web)
    page.click("#clear-failed")
    refused_without_reason(page, "#confirm-clear", "#clear-reason")
    page.fill("#clear-reason", "try once more")
    page.click("#confirm-clear")
    assert final_state(page) == "success"
    run_url = page.url
    second = page.context.new_page()
    for tab in (page, second):
        tab.goto(run_url)
        tab.click("#mark-run")
        tab.select_option("#mark-state", "failed")
    refused_without_reason(page, "#confirm-mark", "#mark-reason")
    page.fill("#mark-reason", "the output was wrong")
    page.click("#confirm-mark")
    wait_state(page, "failed")
    note = page.inner_text("#marked-note")
    assert note.startswith(f"marked failed by user:{USER}: the output was wrong"), note
    shot(page, tmp_path, "case-8-marked")
    second.fill("#mark-reason", "the output was wrong")
    with second.expect_response(lambda r: r.request.method == "POST") as posted:
        second.click("#confirm-mark")
    assert posted.value.status == 409
    assert "failed already" in second.inner_text("#error-message")
    shot(second, tmp_path, "case-8-409")
    second.click(f".way-back a:text-is('run {run_id}')")
    second.wait_for_selector("#run-state .state-failed")
    second.close()


# Every render of a run page's task rows (the first, each poll's, the one after the final
# reload), kept in the tab's sessionStorage across reloads.
ROW_ORDERS = """document.addEventListener("DOMContentLoaded", () => {
    const rows = document.getElementById("task-rows");
    if (!rows) { return; }
    const note = () => {
        const all = JSON.parse(sessionStorage.getItem("row-orders") || "[]");
        const drawn = [...rows.querySelectorAll("tr:not(.waiting)")];
        all.push(drawn.map(r => r.dataset.instance));
        sessionStorage.setItem("row-orders", JSON.stringify(all));
    };
    note();
    new MutationObserver(note).observe(rows, {childList: true});
});"""
LAST_ORDER = "(JSON.parse(sessionStorage.getItem('row-orders') || '[]').slice(-1)[0] || []).length"


def luminance(css_colour: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_case_9_text_as_written_runs_by_dag_rows_in_order_one_date_format_narrow_and_dark(
    browser: Any, page: Any, web: WebServer, tmp_path: Path
) -> None:
    page.context.add_init_script(ROW_ORDERS)
    run_id = trigger(page, web, "case_rows", json.dumps({"note": TEXT}, ensure_ascii=False))
    assert final_state(page) == "success", web.cluster.log_tail()
    order = ["early", "late", "join"]
    page.wait_for_function(f"{LAST_ORDER} === 3")  # the final render noted
    seen = page.evaluate("JSON.parse(sessionStorage.getItem('row-orders'))")
    for rows in seen:
        assert rows == [r for r in order if r in rows], seen
    assert seen[-1] == order
    facts = page.inner_text("dl.facts")
    assert TEXT in facts and "\\u" not in facts
    dates = page.locator("main time").all_inner_texts()
    assert dates and all(re.fullmatch(UTC_DATE, d) for d in dates), dates
    page.click("#tz-toggle")
    local = page.locator("main time").all_inner_texts()
    assert all(re.fullmatch(UTC_DATE + r"[+-]\d\d:\d\d", d) for d in local), local
    shot(page, tmp_path, "case-9-run-local-time")
    page.click("#tz-toggle")
    # the runs page honours ?dag_id=
    with web.client() as c:
        big = c.post("/api/v1/dags/case_rows/runs", json={"conf": {"blob": "x" * 60_000}}).json()
        other = c.post("/api/v1/dags/web_etl/runs", json={}).json()
    web.wait_run("case_rows", big["run_id"])
    web.wait_run("web_etl", other["run_id"])
    page.goto(web.url + "/runs?dag_id=case_rows")
    dags = page.locator("table.runs tbody td:first-child a").all_inner_texts()
    assert dags and set(dags) == {"case_rows"}
    assert page.input_value("form.filters select[name=dag_id]") == "case_rows"
    listed = page.inner_text("table.runs")
    assert run_id in listed and big["run_id"] in listed
    dates = page.locator("main time").all_inner_texts()
    assert dates and all(re.fullmatch(UTC_DATE, d) for d in dates), dates
    shot(page, tmp_path, "case-9-runs-of-one-dag")

    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    narrow_ctx = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    narrow_ctx.add_cookies(page.context.cookies())
    narrow = narrow_ctx.new_page()
    run_page = f"/dags/case_rows/runs/{quote(big['run_id'], safe='')}"
    paths = ["/", "/dags/case_rows", "/runs", "/dead-letters", run_page, f"{run_page}/tasks/early"]
    for i, path in enumerate(paths):
        narrow.goto(web.url + path)
        width = narrow.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide at a 390 px viewport"
        shot(narrow, tmp_path, f"case-9-narrow-dark-{i}")
    dark = narrow.evaluate("getComputedStyle(document.body).backgroundColor")
    assert luminance(dark) < 80 < luminance(light), (dark, light)
    icon = narrow.get_attribute("link[rel=icon]", "href")
    assert narrow_ctx.request.get(web.url + icon).headers["content-type"].startswith("image/svg")
    narrow_ctx.close()
