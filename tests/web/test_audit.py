"""Every change made through the web API is audited under the caller's name (here a token's):
trigger, pause, unpause, cancel, clear, mark, replay, each with its reason when one is given."""

from __future__ import annotations

import httpx
import pytest

from tests.web.conftest import WebServer

pytestmark = pytest.mark.slow


def _post(c: httpx.Client, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
    r = c.post(path, json=body or {})
    assert r.status_code in (200, 201), (path, r.status_code, r.text)
    return r.json()  # type: ignore[no-any-return]


def _audited(c: httpx.Client, **where: str) -> list[tuple[str, str, object]]:
    """(action, actor, reason) of the audit records asked for, oldest first."""
    audit = c.get("/api/v1/audit", params=where).json()["audit"]
    return [(a["action"], a["actor"], a["detail"].get("reason")) for a in reversed(audit)]


def test_every_verb_through_the_api_is_audited_under_the_token_name(web: WebServer) -> None:
    actor = "token:ci"
    with web.client() as c:
        _post(c, "/api/v1/dags/web_etl/pause")
        _post(c, "/api/v1/dags/web_etl/unpause")
        assert _audited(c, dag_id="web_etl")[-2:] == [
            ("pause", actor, ""),
            ("unpause", actor, ""),
        ]

        run = _post(c, "/api/v1/dags/web_etl/runs", {"conf": {"fail_first": True}, "reason": "a"})
        run_id = str(run["run_id"])
        assert web.wait_run("web_etl", run_id)["state"] == "failed"
        base = f"/api/v1/dags/web_etl/runs/{run_id}"
        _post(c, f"{base}/clear", {"tasks": ["publish"], "only_failed": True, "reason": "b"})
        assert web.wait_run("web_etl", run_id)["state"] == "success"
        _post(c, f"{base}/mark", {"state": "failed", "reason": "c"})
        assert _audited(c, run_id=run_id) == [
            ("trigger", actor, "a"),
            ("clear", actor, "b"),
            ("mark", actor, "c"),
        ]

        slow = _post(c, "/api/v1/dags/web_slow/runs", {"conf": {"seconds": 60.0}})
        slow_id = str(slow["run_id"])
        _post(c, f"/api/v1/dags/web_slow/runs/{slow_id}/cancel", {"reason": "d"})
        assert _audited(c, run_id=slow_id) == [("trigger", actor, ""), ("cancel", actor, "d")]

        doomed = _post(c, "/api/v1/dags/web_dlq/runs")
        doomed_id = str(doomed["run_id"])
        assert web.wait_run("web_dlq", doomed_id)["state"] == "failed"
        letters = c.get("/api/v1/dead-letters", params={"dag_id": "web_dlq"}).json()
        letter = next(d for d in letters["dead_letters"] if d["run_id"] == doomed_id)
        _post(c, f"/api/v1/dead-letters/{letter['id']}/replay")
        assert [a[:2] for a in _audited(c, run_id=doomed_id)] == [
            ("trigger", actor),
            ("replay", actor),
        ]
