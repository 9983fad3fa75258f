"""The operator's verbs keep their promises, walked in headless Chromium (Debian's, driven by
Playwright) against a real worker: a task with ``retries=2`` cleared from the run page (asked
for confirmation and a reason) runs its three tries again and the page shows them; a run marked
success closes its dead letters, so a replay from a dead-letter page opened before the mark is
refused with the reason, and the run stays success, its failed tasks flagged as overruled by the
mark (their states kept) and counted in its note: issue 45's cases 4 and 5 (the map of every
case is tests/web/test_browser_cases.py's docstring). Screenshots go to the test's tmp folder
and the run's artifacts (tests/artifacts.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.web.conftest import USER, WebServer
from tests.web.test_browser import browser, page, shot, trigger_from_page, wait_state

pytestmark = pytest.mark.slow
__all__ = ["browser", "page"]  # the fixtures, shared with the other browser tests


def try_cell(page: object, task_id: str) -> str:
    return page.locator(f"#task-rows tr[data-instance={task_id}] .try").inner_text()  # type: ignore[attr-defined, no-any-return]


def clear_failed(page: object, reason: str) -> None:
    """Clear the run's failed tasks from its page: the verb asks for a reason first."""
    page.click("#clear-failed")  # type: ignore[attr-defined]
    page.click("#confirm-clear")  # type: ignore[attr-defined]
    # no reason: the browser keeps the form open and nothing is posted
    assert page.evaluate("document.querySelector('#clear-reason').validity.valueMissing")  # type: ignore[attr-defined]
    page.fill("#clear-reason", reason)  # type: ignore[attr-defined]
    page.click("#confirm-clear")  # type: ignore[attr-defined]


def calls(web: WebServer, run_id: str) -> int:
    """How many times flaky ran in the run, across clears and replays."""
    return web.cluster.count(f"flaky-{run_id}")


def test_case_4_a_cleared_task_runs_its_three_tries_again_and_the_page_shows_them(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    # flaky fails its first five calls: three tries, then (cleared) two more fail and the
    # sixth succeeds, as retries=2 promises a cleared task
    trigger_from_page(page, web, "web_verbs", '{"succeed_on": 6}')
    wait_state(page, "failed")
    assert try_cell(page, "flaky") == "3"
    assert try_cell(page, "report") == "–"  # upstream_failed: it never ran
    shot(page, tmp_path, "verbs-retries-failed")
    clear_failed(page, "flaky dependency is back")
    wait_state(page, "success")
    assert try_cell(page, "flaky") == "6 (3 since clear)"
    assert try_cell(page, "report") == "1"
    assert "flaky dependency is back" in page.inner_text("#audit")  # type: ignore[attr-defined]
    run_id = unquote(page.url.rsplit("/", 1)[1])  # type: ignore[attr-defined]
    assert calls(web, run_id) == 6
    shot(page, tmp_path, "verbs-cleared-full-retries")


def test_case_5_a_replay_of_a_letter_closed_by_a_mark_is_refused_with_the_reason(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    trigger_from_page(page, web, "web_verbs", '{"succeed_on": 1000}')
    wait_state(page, "failed")
    run_url = page.url  # type: ignore[attr-defined]
    run_id = unquote(run_url.rsplit("/", 1)[1])
    clear_failed(page, "one more time")
    assert web.wait_run("web_verbs", run_id)["state"] == "failed"  # a second letter
    with web.client() as c:
        every = c.get("/api/v1/dead-letters", params={"include_replayed": "true"}).json()
    first, second = sorted(d["id"] for d in every["dead_letters"] if d["run_id"] == run_id)

    # a second tab shows the dead letters as they are before the mark: the newer one open
    letters_tab = page.context.new_page()  # type: ignore[attr-defined]
    letters_tab.goto(web.url + "/dead-letters")
    row = letters_tab.locator(f"tr[data-letter='{second}']")
    assert "flaky call 6 fails" in row.inner_text()
    assert letters_tab.locator(f"tr[data-letter='{first}']").count() == 0  # stale: hidden

    page.goto(run_url)  # type: ignore[attr-defined]
    page.click("#mark-run")  # type: ignore[attr-defined]
    page.select_option("#mark-state", "success")  # type: ignore[attr-defined]
    page.fill("#mark-reason", "the output was checked by hand")  # type: ignore[attr-defined]
    page.click("#confirm-mark")  # type: ignore[attr-defined]
    wait_state(page, "success")
    before = calls(web, run_id)

    row.locator("summary.button", has_text="Replay").click()
    row.locator("input[name=reason]").fill("undo the mark")
    with letters_tab.expect_response(lambda r: r.request.method == "POST") as posted:
        row.locator("button", has_text="Replay dead letter").click()
    assert posted.value.status == 409
    refused = letters_tab.inner_text("ul.error")
    assert f"Replay of dead letter {second} refused" in refused
    assert f"marked success by user:{USER}: the output was checked by hand" in refused
    stale = letters_tab.inner_text(f"tr[data-letter='{first}']")
    assert "stale" in stale and "cleared by" in stale  # the older letter, closed by the clear
    shot(letters_tab, tmp_path, "verbs-replay-refused")
    letters_tab.close()

    with web.client() as c:
        api = c.post(f"/api/v1/dead-letters/{first}/replay")
        assert api.status_code == 409, api.text
        assert "is stale" in api.json()["error"] and "one more time" in api.json()["reason"]
        run = c.get(f"/api/v1/dags/web_verbs/runs/{run_id}").json()
    assert run["state"] == "success"
    assert calls(web, run_id) == before  # nothing ran again
    page.reload()  # type: ignore[attr-defined]
    wait_state(page, "success")
    assert "undo the mark" not in page.inner_text("#audit")  # type: ignore[attr-defined]
    shot(page, tmp_path, "verbs-marked-stays-success")


def test_a_run_marked_success_flags_the_tasks_that_had_not_succeeded_and_counts_them(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    """The mark keeps every task run's state (flaky failed, report upstream_failed): each says,
    in words beside its colour, that the run's state overrules it, and the note counts them; a
    run not marked says neither."""
    pg: Any = page
    trigger_from_page(page, web, "web_verbs", '{"succeed_on": 1000}')
    wait_state(page, "failed")
    assert pg.locator(".overruled, .overruled-tag, #marked-overruled").count() == 0
    shot(page, tmp_path, "verbs-failed-not-marked")

    pg.click("#mark-run")
    pg.select_option("#mark-state", "success")
    pg.fill("#mark-reason", "the report is not needed today")
    pg.click("#confirm-mark")
    wait_state(page, "success")
    note = pg.inner_text("#marked-note")
    assert "2 of 2 tasks had not succeeded (1 failed, 1 upstream_failed)" in note, note
    flag = f"run marked success by user:{USER}"
    for task, state in (("flaky", "failed"), ("report", "upstream_failed")):
        row = pg.locator(f"#task-rows tr[data-instance={task}]")
        assert row.get_attribute("class") == "overruled"
        assert row.locator(f".st .badge.state-{state}").count() == 1  # the state as it ended
        assert flag in row.inner_text()
        node = pg.locator(f"#run-graph svg.graph.lr g.node[data-task={task}]")
        assert node.get_attribute("class") == f"node overruled state-{state}"
        assert node.locator("title").text_content() == f"{task}: {state} ({flag})"
        assert node.locator("text.flag").text_content() == "⚑"
        assert node.is_visible()
    shot(page, tmp_path, "verbs-marked-success-flagged")
    pg.emulate_media(color_scheme="dark")
    shot(page, tmp_path, "verbs-marked-success-flagged-dark")
    pg.emulate_media(color_scheme="light")
