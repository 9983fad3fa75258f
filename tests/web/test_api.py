"""The REST API against a real worker, Redis and PostgreSQL: every route refuses callers without
credentials, changes need CSRF proof when made with a session, hostile input gets a clear 4xx,
and triggering, inspecting, logs and dead letters work end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest
import uvicorn

from beatflow.settings import Settings
from beatflow.web import create_web_app
from tests import services
from tests.procs import beatflow_env, wait_for
from tests.web.conftest import DAGS, PASSWORD, TOKEN, USER, WebServer

pytestmark = pytest.mark.slow

RUN = "/api/v1/dags/web_etl/runs/r1"
ROUTES = [
    ("GET", "/api/v1/health"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/dags"),
    ("GET", "/api/v1/dags/web_etl"),
    ("GET", "/api/v1/dags/web_etl/grid"),
    ("POST", "/api/v1/dags/web_etl/pause"),
    ("POST", "/api/v1/dags/web_etl/unpause"),
    ("GET", "/api/v1/runs"),
    ("GET", "/api/v1/dags/web_etl/runs"),
    ("POST", "/api/v1/dags/web_etl/runs"),
    ("GET", RUN),
    ("GET", f"{RUN}/status"),
    ("POST", f"{RUN}/cancel"),
    ("POST", f"{RUN}/clear"),
    ("POST", f"{RUN}/mark"),
    ("GET", f"{RUN}/tasks/extract"),
    ("GET", f"{RUN}/tasks/extract/tries"),
    ("GET", f"{RUN}/tasks/extract/logs"),
    ("GET", "/api/v1/dead-letters"),
    ("POST", "/api/v1/dead-letters/1/replay"),
    ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/access"),
    ("GET", "/api/v1/notifications"),
    ("POST", "/api/v1/dead-letters/purge"),
    ("GET", "/"),
    ("GET", "/runs"),
    ("GET", "/dead-letters"),
    ("GET", "/notifications"),
    ("GET", "/dags/web_etl"),
    ("GET", "/dags/web_etl/runs/r1"),
    ("GET", "/dags/web_etl/runs/r1/tasks/extract"),
    ("GET", "/static/app.css"),
    ("POST", "/dags/web_etl/pause"),
    ("POST", "/dags/web_etl/trigger"),
    ("POST", "/dags/web_etl/runs/r1/cancel"),
    ("POST", "/dags/web_etl/runs/r1/clear"),
    ("POST", "/dags/web_etl/runs/r1/mark"),
    ("POST", "/dead-letters/1/replay"),
    ("POST", "/logout"),
]


def trigger(c: httpx.Client, dag_id: str, **body: object) -> dict[str, object]:
    r = c.post(f"/api/v1/dags/{dag_id}/runs", json=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def login(web: WebServer) -> tuple[httpx.Client, str]:
    """A browser-like session: the login form's token, the session cookie, the page's CSRF."""
    c = web.client(token=None, follow_redirects=False)
    form = c.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    r = c.post(
        "/login",
        data={"username": USER, "password": PASSWORD, "csrf_token": token, "next": "/"},
    )
    assert r.status_code == 303, r.text
    page = c.get("/")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    return c, csrf


# ---------------------------------------------------------------------- authentication


def test_healthz_is_open_and_says_nothing_but_ok(web: WebServer) -> None:
    r = httpx.get(web.url + "/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_refuses_a_caller_without_credentials(
    web: WebServer, method: str, path: str
) -> None:
    with web.client(token=None) as c:
        r = c.request(method, path)
    assert r.status_code == 401, (path, r.status_code, r.text[:200])
    assert "authentication required" in r.json()["error"] or "log in" in r.json()["error"]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_refuses_a_wrong_token(web: WebServer, method: str, path: str) -> None:
    with web.client(token=TOKEN + "x") as c:
        r = c.request(method, path)
    assert r.status_code == 401, (path, r.status_code)


def test_a_page_without_a_session_redirects_a_browser_to_the_login(web: WebServer) -> None:
    with web.client(token=None, follow_redirects=False) as c:
        r = c.get("/dags/web_etl", headers={"Accept": "text/html"})
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=%2Fdags%2Fweb_etl"


def test_other_authorization_schemes_and_forged_cookies_are_refused(web: WebServer) -> None:
    with web.client(token=None) as c:
        assert c.get("/api/v1/dags", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    with web.client(token=None, cookies={"bf_session": "eyJ1IjoiYWRtaW4ifQ.AAAA"}) as c:
        assert c.get("/api/v1/dags").status_code == 401


def test_login_sets_an_httponly_samesite_strict_session_and_refuses_a_wrong_password(
    web: WebServer,
) -> None:
    c = web.client(token=None, follow_redirects=False)
    form = c.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    bad = c.post("/login", data={"username": USER, "password": "nope", "csrf_token": token})
    assert bad.status_code == 401
    assert "wrong user name or password" in bad.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', bad.text).group(1)  # type: ignore[union-attr]
    ok = c.post(
        "/login",
        data={"username": USER, "password": PASSWORD, "csrf_token": token, "next": "//evil.com"},
    )
    assert ok.status_code == 303
    assert ok.headers["location"] == "/"  # no open redirect
    cookie = next(v for k, v in ok.headers.multi_items() if k == "set-cookie" and "bf_session" in v)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert c.get("/api/v1/dags").status_code == 200


def test_a_login_post_without_the_form_token_is_refused(web: WebServer) -> None:
    with web.client(token=None) as c:
        r = c.post("/login", data={"username": USER, "password": PASSWORD, "csrf_token": "x"})
    assert r.status_code == 403


def test_session_changes_without_csrf_proof_are_refused(web: WebServer) -> None:
    c, csrf = login(web)
    try:
        assert c.post("/dags/web_etl/pause", data={"paused": "true"}).status_code == 403
        bad = c.post("/dags/web_etl/pause", data={"paused": "true", "csrf_token": "wrong"})
        assert bad.status_code == 403
        cross = c.post(
            "/dags/web_etl/pause",
            data={"paused": "true", "csrf_token": csrf},
            headers={"Origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        assert c.post("/api/v1/dags/web_etl/pause").status_code == 403  # API: X-CSRF-Token
        assert c.get("/api/v1/dags/web_etl").json()["paused"] is False  # nothing changed
        ok = c.post("/dags/web_etl/pause", data={"paused": "true", "csrf_token": csrf})
        assert ok.status_code == 303
        api = c.post("/api/v1/dags/web_etl/unpause", headers={"X-CSRF-Token": csrf})
        assert api.status_code == 200
    finally:
        c.close()
    with web.client() as t:
        audit = t.get("/api/v1/audit", params={"dag_id": "web_etl"}).json()["audit"]
    assert [(a["action"], a["actor"]) for a in audit[:2]] == [
        ("unpause", f"user:{USER}"),
        ("pause", f"user:{USER}"),
    ]


def test_a_session_cookie_captured_before_logout_is_refused_after_it(web: WebServer) -> None:
    c, csrf = login(web)
    try:
        cookie = c.cookies["bf_session"]
        assert c.get("/api/v1/dags").status_code == 200
        out = c.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/login"
    finally:
        c.close()
    # the captured cookie, replayed as an attacker who copied it would
    with web.client(token=None, cookies={"bf_session": cookie}) as replay:
        assert replay.get("/api/v1/dags").status_code == 401
        pause = replay.post("/api/v1/dags/web_etl/pause", headers={"X-CSRF-Token": csrf})
        assert pause.status_code == 401
        form = replay.post("/dags/web_etl/pause", data={"paused": "true", "csrf_token": csrf})
        assert form.status_code == 401
    with web.client() as t:
        assert t.get("/api/v1/dags/web_etl").json()["paused"] is False


# ---------------------------------------------------------------------- hostile input


def test_hostile_ids_get_a_clear_400_or_404(web: WebServer) -> None:
    with web.client() as c:
        for path in (
            "/api/v1/dags/..%2F..%2Fetc%2Fpasswd",
            "/api/v1/dags/a%00b",
            "/api/v1/dags/..",
            "/api/v1/dags/" + "x" * 300,
            "/api/v1/dags/web_etl/runs/..%5C..",
            "/api/v1/dags/web_etl/runs/r%20id",
        ):
            r = c.get(path)
            assert r.status_code in (400, 404), (path, r.status_code)
            assert "error" in r.json()
        assert c.get("/api/v1/dags/nope").status_code == 404
        assert "no DAG" in c.get("/api/v1/dags/web_elt").json()["error"]
        assert c.get("/api/v1/dags/web_etl/runs/nope").status_code == 404
        assert c.get("/static/..%2Fapi.py").status_code == 404
        assert c.get("/api/v1/runs", params={"limit": 0}).status_code == 400
        assert c.get("/api/v1/runs", params={"state": "bogus"}).status_code == 400
        assert c.get("/api/v1/runs", params={"cursor": "abc"}).status_code == 400


def test_bad_conf_and_bodies_are_refused_with_every_problem_and_nothing_enqueued(
    web: WebServer,
) -> None:
    with web.client() as c:
        before = c.get("/api/v1/dags/web_etl/runs").json()["runs"]
        url = "/api/v1/dags/web_etl/runs"
        r = c.post(url, content=b'{"conf": {"rows": 1,}}', headers={"content-type": "x"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
        assert c.post(url, json=[1]).status_code == 400
        r = c.post(url, json={"conf": "{not json"})
        assert r.status_code == 400 and "conf is not valid JSON" in r.json()["error"]
        r = c.post(url, json={"conf": {"rows": "three", "rowz": 1}})
        assert r.status_code == 400
        assert len(r.json()["problems"]) == 2, r.json()
        assert c.post(url, json={"conf": {}, "run_id": "../x"}).status_code == 400
        assert c.post(url, json={"run_id": 5}).status_code == 400
        typo = c.post(url, json={"confg": {"rows": 1}})
        assert typo.status_code == 400 and "unknown field(s) confg" in typo.json()["error"]
        assert c.post("/api/v1/dags/nope/runs", json={}).status_code == 404
        assert c.get("/api/v1/dags/web_etl/runs").json()["runs"] == before


def test_a_conf_out_of_a_params_schema_is_a_400_naming_each_param_and_why(
    web: WebServer,
) -> None:
    with web.client() as c:
        url = "/api/v1/dags/web_groups/runs"
        before = c.get(url).json()["runs"]
        r = c.post(url, json={"conf": {"batch": 500, "region": "asia", "day": "2026-12-06"}})
        assert r.status_code == 400
        assert r.json()["fields"] == {
            "batch": "must be at most 100, got 500",
            "region": "must be one of 'eu', 'us', got 'asia'",
        }
        assert '"batch" must be at most 100, got 500' in r.json()["problems"]
        assert c.get(url).json()["runs"] == before  # nothing enqueued
        detail = c.get("/api/v1/dags/web_groups").json()
        batch = next(p for p in detail["params"] if p["name"] == "batch")
        assert batch["schema"] == {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "title": "Batch size",
            "description": "rows",
        }
        assert {"group_id": "extract", "parent": None, "tooltip": "",
                "tasks": ["extract.pull", "extract.clean"]} in detail["groups"]  # fmt: skip
        grid = c.get("/api/v1/dags/web_groups/grid").json()
        assert [(r["kind"], r["id"]) for r in grid["rows"]][:2] == [
            ("group", "extract"),
            ("task", "extract.pull"),
        ]


def test_oversized_bodies_are_refused_before_they_are_read(web: WebServer) -> None:
    big = b'{"conf": {"rows": 1}, "pad": "' + b"x" * 100_000 + b'"}'
    with web.client() as c:
        r = c.post("/api/v1/dags/web_etl/runs", content=big)
        assert r.status_code == 413
        assert "over the limit" in r.json()["error"]

        def chunks():  # no Content-Length: counted as it streams in
            for _ in range(20):
                yield b"x" * 10_000

        r = c.post("/api/v1/dags/web_etl/runs", content=chunks())
        assert r.status_code == 413


# ---------------------------------------------------------------------- reading


def test_the_dag_list_shows_schedules_in_words_next_runs_and_broken_modules(
    web: WebServer,
) -> None:
    with web.client() as c:
        body = c.get("/api/v1/dags").json()
        etl = next(d for d in body["dags"] if d["dag_id"] == "web_etl")
        assert etl["schedule_words"] == "every day at 02:30"
        assert etl["next_run"] is not None and etl["next_run"].endswith("02:30:00+00:00")
        assert etl["tags"] == ["web", "etl"]
        assert any("broken_web.py" in e["file"] for e in body["errors"])
        found = c.get("/api/v1/dags", params={"q": "web_slow"}).json()  # not web_bf_slow
        assert [d["dag_id"] for d in found["dags"]] == ["web_slow"] and found["total"] == 1
        page = c.get("/api/v1/dags", params={"limit": 1}).json()
        assert len(page["dags"]) == 1 and page["next_offset"] == 1
        detail = c.get("/api/v1/dags/web_etl").json()
        assert [t["task_id"] for t in detail["tasks"]] == ["extract", "total", "publish"]
        assert {"from": "extract", "to": "total", "kind": "data"} in detail["edges"]
        assert {p["name"] for p in detail["params"]} == {"rows", "fail_first"}
        health = c.get("/api/v1/health").json()
        assert health["status"] == "ok" and health["broken"] == 1
        spec = c.get("/api/v1/openapi.json").json()
        assert "/api/v1/dags/{dag_id}/runs" in spec["paths"]


def test_a_triggered_run_is_visible_with_its_tasks_grid_logs_and_audit(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_etl", conf={"rows": 4}, reason="from CI")
        assert run["conf"] == {"rows": 4, "fail_first": False}
        final = web.wait_run("web_etl", run["run_id"])
        assert final["state"] == "success"
        assert [t["state"] for t in final["tasks"]] == ["success"] * 3  # type: ignore[index]
        base = f"/api/v1/dags/web_etl/runs/{run['run_id']}"
        task = c.get(f"{base}/tasks/total").json()
        assert task["result"] == {"preview": "6", "bytes": 1, "truncated": False}
        assert task["flower_url"].endswith(f"/task/{task['celery_task_id']}")
        status = c.get(f"{base}/status").json()
        assert status["final"] and status["tasks"]["publish"] == "success"
        grid = c.get("/api/v1/dags/web_etl/grid").json()
        assert grid["runs"][-1]["run_id"] == run["run_id"]
        assert [row["states"][-1] for row in grid["tasks"]] == ["success"] * 3

        def logged() -> list[dict[str, object]]:
            return c.get(f"{base}/tasks/extract/logs").json()["lines"]  # type: ignore[no-any-return]

        lines = wait_for(logged, 30, 0.1, "extract's log lines")
        assert any(f"extracting 4 rows for {run['run_id']}" in line["message"] for line in lines)  # type: ignore[index, attr-defined]
        assert all(line["try_number"] == 1 for line in lines)  # type: ignore[index]
        tries = c.get(f"{base}/tasks/extract/tries").json()["tries"]
        assert [t["try_number"] for t in tries] == [1] and tries[0]["state"] == "success"
        assert tries[0]["first_log_at"] is not None
        assert c.get(f"{base}/tasks/nope").status_code == 404
        audit = c.get("/api/v1/audit", params={"run_id": run["run_id"]}).json()["audit"]
        assert audit[0]["action"] == "trigger" and audit[0]["actor"] == "token:ci"
        assert audit[0]["detail"]["reason"] == "from CI"


def test_runs_are_listed_newest_first_with_filters_and_a_cursor(web: WebServer) -> None:
    with web.client() as c:
        ids = [trigger(c, "web_etl", run_id=f"page-{i}")["run_id"] for i in range(3)]
        for run_id in ids:
            web.wait_run("web_etl", run_id)
        first = c.get("/api/v1/dags/web_etl/runs", params={"limit": 2}).json()
        assert [r["run_id"] for r in first["runs"]] == ["page-2", "page-1"]
        second = c.get(
            "/api/v1/dags/web_etl/runs", params={"limit": 2, "cursor": first["next_cursor"]}
        ).json()
        assert second["runs"][0]["run_id"] == "page-0"
        ok = c.get("/api/v1/runs", params={"state": "success", "dag_id": "web_etl"}).json()
        assert {"page-0", "page-1", "page-2"} <= {r["run_id"] for r in ok["runs"]}
        none = c.get("/api/v1/runs", params={"state": "failed", "dag_id": "web_slow"}).json()
        assert none == {"runs": [], "next_cursor": None}
        again = c.post("/api/v1/dags/web_etl/runs", json={"run_id": "page-0"})
        assert again.status_code == 201 and again.json()["state"] == "success"  # one run


def test_runs_are_found_by_a_part_of_their_id_and_the_day_they_were_queued(
    web: WebServer,
) -> None:
    with web.client() as c:
        for run_id in ("find-me_1", "find-meX2", "other-3"):
            trigger(c, "web_etl", run_id=run_id)
        queued = trigger(c, "web_etl", run_id="find-me_1")["queued_at"]

        def found(**params: str) -> list[str]:
            r = c.get("/api/v1/runs", params={"dag_id": "web_etl", **params})
            assert r.status_code == 200, r.text
            return [run["run_id"] for run in r.json()["runs"]]

        assert found(search="find-me") == ["find-meX2", "find-me_1"]
        assert found(search="me_") == ["find-me_1"]  # _ is a character, not a wildcard
        day = queued[:10]
        assert set(found(search="-", since=day, until=day)) >= {"find-me_1", "other-3"}
        assert found(search="-", until="2000-01-01") == []  # a bare date: through that day
        assert found(search="-", since="2999-01-01T00:00Z") == []
        bad = c.get("/api/v1/runs", params={"since": "yesterday"})
        assert bad.status_code == 400 and "ISO date" in bad.json()["error"]
        page = c.get("/runs", params={"dag_id": "web_etl", "search": "meX"})
        assert page.status_code == 200 and "find-meX2" in page.text and "other-3" not in page.text


def test_a_failed_task_shows_its_error_traceback_and_logs(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_etl", conf={"fail_first": True})
        final = web.wait_run("web_etl", run["run_id"])
        assert final["state"] == "failed"
        base = f"/api/v1/dags/web_etl/runs/{run['run_id']}/tasks/publish"
        task = c.get(base).json()
        assert task["state"] == "failed"
        assert "the first publish fails on purpose" in task["error"]
        assert "RuntimeError" in task["traceback"]

        def warned() -> list[dict[str, str]]:
            lines = c.get(f"{base}/logs").json()["lines"]
            return [line for line in lines if "publish call 1" in line["message"]]

        assert wait_for(warned, 30, 0.1, "publish's log line")[0]["level"] == "warning"  # type: ignore[index]


def test_a_dead_letter_is_listed_and_replayed_once(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_dlq")
        assert web.wait_run("web_dlq", run["run_id"])["state"] == "failed"
        letters = c.get("/api/v1/dead-letters", params={"dag_id": "web_dlq"}).json()
        letter = next(d for d in letters["dead_letters"] if d["run_id"] == run["run_id"])
        assert "doomed until replayed" in letter["error"] and letter["traceback"]
        r = c.post(f"/api/v1/dead-letters/{letter['id']}/replay")
        assert r.status_code == 200, r.text
        assert web.wait_run("web_dlq", run["run_id"])["state"] == "success"
        again = c.post(f"/api/v1/dead-letters/{letter['id']}/replay")
        assert again.status_code == 409 and "was replayed" in again.json()["error"]
        assert c.post("/api/v1/dead-letters/999999/replay").status_code == 404
        audit = c.get("/api/v1/audit", params={"run_id": run["run_id"]}).json()["audit"]
        assert audit[0]["action"] == "replay" and audit[0]["detail"] == {
            "dead_letter": letter["id"]
        }


# ---------------------------------------------------------------------- the CLI through the API


def _cli(
    web: WebServer, tmp_path: Path, token: str, *args: str
) -> subprocess.CompletedProcess[str]:
    secret = tmp_path / "token"
    secret.write_text(token + "\n")
    env = beatflow_env(
        {
            # nothing a CI runner would have: no Redis, no results DB, no DAG code
            "BEATFLOW_BROKER_URL": "redis://127.0.0.1:1/0",
            "BEATFLOW_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
            "BEATFLOW_DAGS_FOLDER": str(tmp_path / "no-dags"),
            "BEATFLOW_API_URL": web.url,
            "BEATFLOW_API_TOKEN_FILE": str(secret),
        }
    )
    argv = [sys.executable, "-c", "from beatflow.cli import run; run()", "dags", "trigger", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_dags_trigger_goes_through_the_api_with_only_a_token(
    web: WebServer, tmp_path: Path
) -> None:
    done = _cli(web, tmp_path, TOKEN, "web_etl", "--conf", '{"rows": 2}', "--wait", "--json")
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["state"] == "success" and run["conf"] == {"rows": 2, "fail_first": False}
    assert [t["task_id"] for t in run["tasks"]] == ["extract", "total", "publish"]
    bad = _cli(web, tmp_path, TOKEN, "web_etl", "--conf", '{"rowz": 2}')
    assert bad.returncode == 1
    assert "API 400" in bad.stderr and 'unknown key "rowz"' in bad.stderr
    wrong = _cli(web, tmp_path, TOKEN + "x", "web_etl")
    assert wrong.returncode == 1 and "API 401" in wrong.stderr


# ---------------------------------------------------------------------- the operator's verbs


def test_a_running_run_is_cancelled_once_and_audited(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_slow", conf={"seconds": 60.0})
        base = f"/api/v1/dags/web_slow/runs/{run['run_id']}"

        def started() -> bool:
            return c.get(f"{base}/status").json()["tasks"].get("slow") == "running"

        wait_for(started, 30, 0.1, "the slow task to start")
        r = c.post(f"{base}/cancel", json={"reason": "too slow", "terminate": True})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "cancelled"
        assert c.get(f"{base}/status").json()["tasks"]["slow"] == "cancelled"
        again = c.post(f"{base}/cancel", json={})
        assert again.status_code == 409 and "already ended" in again.json()["error"]
        assert c.post(f"{base}/cancel", json={"terminate": "yes"}).status_code == 400
        audit = c.get("/api/v1/audit", params={"run_id": run["run_id"]}).json()["audit"]
        assert audit[0]["action"] == "cancel" and audit[0]["actor"] == "token:ci"
        assert audit[0]["detail"]["reason"] == "too slow"


def test_clearing_a_failed_task_runs_it_again_as_a_new_try(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_etl", conf={"fail_first": True})
        assert web.wait_run("web_etl", run["run_id"])["state"] == "failed"
        base = f"/api/v1/dags/web_etl/runs/{run['run_id']}"
        bad = c.post(f"{base}/clear", json={"tasks": ["publsh"]})
        assert bad.status_code == 400 and "publsh" in bad.json()["error"]
        assert c.post(f"{base}/clear", json={"tasks": "publish"}).status_code == 400
        r = c.post(f"{base}/clear", json={"tasks": ["publish"], "only_failed": True})
        assert r.status_code == 200, r.text
        assert web.wait_run("web_etl", run["run_id"])["state"] == "success"
        task = c.get(f"{base}/tasks/publish").json()
        assert task["state"] == "success" and task["try_number"] == 2

        def logged_tries() -> list[dict[str, object]] | None:
            # each try's own log lines; the worker writes them a moment after the task ends
            tries = c.get(f"{base}/tasks/publish/tries").json()["tries"]
            return tries if all(t["first_log_at"] for t in tries) else None

        tries = wait_for(logged_tries, 30, 0.1, "both tries' logs")
        assert [(t["try_number"], t["state"]) for t in tries] == [(1, None), (2, "success")]  # type: ignore[union-attr, index]
        try1 = c.get(f"{base}/tasks/publish/logs", params={"try_number": 1}).json()["lines"]
        assert any("publish call 1" in line["message"] for line in try1)
        assert not any("publish call 2" in line["message"] for line in try1)


def test_marking_a_run_sets_its_state_and_refuses_nonsense(web: WebServer) -> None:
    with web.client() as c:
        run = trigger(c, "web_etl", conf={"fail_first": True})
        assert web.wait_run("web_etl", run["run_id"])["state"] == "failed"
        base = f"/api/v1/dags/web_etl/runs/{run['run_id']}"
        assert c.post(f"{base}/mark", json={"state": "running"}).status_code == 400
        assert c.post(f"{base}/mark", json={}).status_code == 400
        r = c.post(f"{base}/mark", json={"state": "success", "reason": "checked by hand"})
        assert r.status_code == 200 and r.json()["state"] == "success"
        assert c.post(f"{base}/mark", json={"state": "success"}).status_code == 409
        missing = c.post("/api/v1/dags/web_etl/runs/no-such-run/mark", json={"state": "failed"})
        assert missing.status_code == 404


def test_password_guessing_is_slowed_down_per_address(web: WebServer) -> None:
    """Last in the module: it leaves 127.0.0.1 unable to log in for a minute."""
    with web.client(token=None) as c:
        codes = []
        for _ in range(12):
            form = c.get("/login")
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
            r = c.post("/login", data={"username": USER, "password": "guess", "csrf_token": token})
            codes.append(r.status_code)
        # one failed login earlier in this module counts too
        assert set(codes) == {401, 429} and codes[-2:] == [429, 429], codes
        assert codes.index(429) <= 10
        assert "too many failed logins" in r.json()["error"]


def test_a_database_behind_the_code_is_a_503_that_says_to_upgrade(
    postgres_server: services.PostgresServer, redis_url: str
) -> None:
    name = f"bf_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)  # never migrated
    try:
        settings = Settings(
            broker_url=redis_url,
            database_url=url,
            dags_folder=str(DAGS),
            web_password="pw",
            web_tokens=f"ci:{TOKEN}",
        )
        app = create_web_app(settings)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: server.started, 30, 0.05, "uvicorn to start")
            port = server.servers[0].sockets[0].getsockname()[1]
            r = httpx.get(
                f"http://127.0.0.1:{port}/api/v1/health",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert r.status_code == 503
            assert "run `beatflow db upgrade`" in r.json()["error"]
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    finally:
        postgres_server.drop_database(name)
