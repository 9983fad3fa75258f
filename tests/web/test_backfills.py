"""Backfills through the API, on a real cluster: a dry run creates nothing, reprocess none and
failed choose the runs they create or re-run, a backfill's own max_active_runs holds, a cancel
stops the whole backfill, and bad requests are 400s."""

from __future__ import annotations

from typing import Any

from tests.procs import wait_for
from tests.web.conftest import WebServer

DAILY = "/api/v1/dags/web_bf_daily"
SLOW = "/api/v1/dags/web_bf_slow"


def _runs(web: WebServer, path: str) -> list[dict[str, Any]]:
    with web.client() as c:
        return c.get(f"{path}/runs", params={"limit": 200}).json()["runs"]


def _wait_backfill(web: WebServer, path: str, backfill_id: int) -> dict[str, Any]:
    with web.client() as c:

        def ended() -> dict[str, Any] | None:
            body = c.get(f"{path}/backfills/{backfill_id}").json()
            return body if body["state"] != "running" else None

        return wait_for(ended, 90.0, 0.2, f"backfill {backfill_id} to end")  # type: ignore[no-any-return]


def test_dry_run_creates_nothing_then_reprocess_none_and_failed(web: WebServer) -> None:
    body = {"start": "2026-01-01", "end": "2026-01-03", "reason": "test"}
    with web.client() as c:
        dry = c.post(f"{DAILY}/backfills", json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert dry.json()["backfill"] is None
        assert [e["action"] for e in dry.json()["plan"]] == ["create"] * 3
        assert _runs(web, DAILY) == []  # a dry run creates nothing
        assert c.get(f"{DAILY}/backfills").json()["backfills"] == []

        made = c.post(f"{DAILY}/backfills", json=body)
        assert made.status_code == 201, made.text
        first = made.json()["backfill"]
        assert first["runs_total"] == 3 and first["reprocess"] == "none"
    done = _wait_backfill(web, DAILY, first["id"])
    assert done["state"] == "done"
    assert done["progress"] == {"success": 2, "failed": 1}, done

    with web.client() as c:
        # none: every date has a run, so nothing to do
        again = c.post(f"{DAILY}/backfills", json={**body, "dry_run": True}).json()
        assert again["plan"] == []
        # all: every ended run again
        every = c.post(f"{DAILY}/backfills", json={**body, "dry_run": True, "reprocess": "all"})
        assert len(every.json()["plan"]) == 3
        # failed: only the 2nd, re-run (not created)
        redo = c.post(f"{DAILY}/backfills", json={**body, "reprocess": "failed"})
        assert redo.status_code == 201, redo.text
        plan = redo.json()["plan"]
        assert [(e["logical_date"][:10], e["action"], e["state"]) for e in plan] == [
            ("2026-01-02", "rerun", "failed")
        ]
    second = _wait_backfill(web, DAILY, redo.json()["backfill"]["id"])
    assert second["progress"] == {"success": 1}, second
    runs = _runs(web, DAILY)
    assert len(runs) == 3 and {r["state"] for r in runs} == {"success"}
    with web.client() as c:
        listed = c.get(f"{DAILY}/backfills").json()["backfills"]
    assert [b["id"] for b in listed] == [second["id"], done["id"]]


def test_a_backfills_own_max_active_runs_holds_and_cancel_stops_it(web: WebServer) -> None:
    body = {"start": "2026-02-01", "end": "2026-02-04", "max_active_runs": 1}
    with web.client() as c:
        made = c.post(f"{SLOW}/backfills", json={**body, "reason": "cap"})
        assert made.status_code == 201, made.text
        backfill = made.json()["backfill"]
        assert backfill["released"] == 1 and backfill["progress"].get("pending") == 3
        assert len(made.json()["runs"]) == 1
        assert len(_runs(web, SLOW)) == 1  # the other three are not runs yet
        cancelled = c.post(f"{SLOW}/backfills/{backfill['id']}/cancel", json={"reason": "enough"})
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["progress"] == {"cancelled": 1, "skipped": 3}
        again = c.post(f"{SLOW}/backfills/{backfill['id']}/cancel", json={})
        assert again.status_code == 409
        audit = c.get("/api/v1/audit", params={"dag_id": "web_bf_slow"}).json()
    assert "backfill_cancel" in {e["action"] for e in audit["audit"]}
    assert [r["state"] for r in _runs(web, SLOW)] == ["cancelled"]


def test_bad_backfills_are_400s_and_an_unknown_dag_404(web: WebServer) -> None:
    with web.client() as c:
        reversed_range = c.post(
            f"{DAILY}/backfills", json={"start": "2026-03-02", "end": "2026-03-01"}
        )
        assert reversed_range.status_code == 400
        assert "before" in reversed_range.json()["error"]
        huge = c.post(
            "/api/v1/dags/web_etl/backfills",
            json={"start": "1990-01-01", "end": "2026-01-01", "dry_run": True},
        )
        assert huge.status_code == 400
        assert "split it into smaller ranges" in huge.json()["error"]
        manual = c.post(
            "/api/v1/dags/web_slow/backfills", json={"start": "2026-01-01", "end": "2026-01-02"}
        )
        assert manual.status_code == 400
        typo = c.post(
            f"{DAILY}/backfills",
            json={"start": "2026-01-01", "end": "2026-01-02", "reproces": "all"},
        )
        assert typo.status_code == 400
        assert (
            c.post(
                "/api/v1/dags/nope/backfills", json={"start": "2026-01-01", "end": "2026-01-02"}
            ).status_code
            == 404
        )
        assert c.get(f"{DAILY}/backfills/999999").status_code == 404
