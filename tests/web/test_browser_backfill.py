"""The DAG page's backfill form in headless Chromium against a real worker: the dry-run preview
lists the runs and creates none, the confirmation (with a reason) starts the backfill, its row
shows its runs by state, and its cancel button stops it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.procs import wait_for
from tests.web.conftest import WebServer
from tests.web.test_browser import browser, page, shot

pytestmark = pytest.mark.slow
__all__ = ["browser", "page"]  # the fixtures, shared with the other browser tests


def _api(web: WebServer, path: str) -> Any:
    with web.client() as c:
        return c.get(path).json()


def test_the_backfill_form_previews_then_starts_and_cancels(
    page: object, web: WebServer, tmp_path: Path
) -> None:
    pg: Any = page
    pg.goto(f"{web.url}/dags/web_bf_daily")
    pg.click("#backfill-open")
    pg.fill("#backfill-start", "2026-01-05")
    pg.fill("#backfill-end", "2026-01-06")
    pg.select_option("#backfill-reprocess", "none")
    pg.fill("#backfill-max-active", "1")
    pg.click("#backfill-preview")
    plan = pg.locator("#backfill-plan li").all_inner_texts()
    assert [p.rsplit(" ", 1)[1] for p in plan] == ["create", "create"], plan
    assert "2026-01-05" in plan[0] and "2026-01-06" in plan[1], plan
    shot(pg, tmp_path, "backfill-preview")
    assert _api(web, "/api/v1/dags/web_bf_daily/runs")["runs"] == []  # a preview makes nothing
    pg.click("#backfill-confirm")
    # no reason: the browser keeps the form open and nothing is posted
    assert pg.evaluate("document.querySelector('#backfill-reason').validity.valueMissing")
    pg.fill("#backfill-reason", "catch up January")
    pg.click("#backfill-confirm")
    pg.wait_for_selector("table.backfills")
    [made] = _api(web, "/api/v1/dags/web_bf_daily/backfills")["backfills"]
    assert (made["reason"], made["max_active_runs"], made["runs_total"]) == (
        "catch up January",
        1,
        2,
    )

    def done() -> bool:
        return _api(web, f"/api/v1/dags/web_bf_daily/backfills/{made['id']}")["state"] == "done"

    wait_for(done, 90.0, 0.2, "the backfill to end")
    pg.reload()
    assert "2 success" in pg.inner_text(f"#backfill-{made['id']} .progress")
    shot(pg, tmp_path, "backfill-done")

    # a backfill of the slow DAG, one run at a time, cancelled from its row
    with web.client() as c:
        body = {"start": "2026-01-01", "end": "2026-01-03", "max_active_runs": 1}
        slow = c.post("/api/v1/dags/web_bf_slow/backfills", json=body).json()["backfill"]
    pg.goto(f"{web.url}/dags/web_bf_slow")
    pg.click(f"#backfill-cancel-{slow['id']}")
    pg.fill(f"#backfill-cancel-reason-{slow['id']}", "wrong range")
    pg.click(f"#backfill-confirm-cancel-{slow['id']}")
    pg.wait_for_selector(f"#backfill-{slow['id']} .state-cancelled")
    assert "2 skipped" in pg.inner_text(f"#backfill-{slow['id']} .progress")
    runs = _api(web, "/api/v1/dags/web_bf_slow/runs")["runs"]
    assert [r["state"] for r in runs] == ["cancelled"]
