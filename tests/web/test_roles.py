"""Roles against a real worker, Redis and PostgreSQL: users and API tokens from files of hashed
secrets (BEATFLOW_WEB_USERS_FILE, BEATFLOW_WEB_TOKEN_HASHES_FILE), each with a role. A viewer
reads but changes nothing (403 saying which role it has and which one is needed, never a 5xx,
nothing enqueued), an operator runs the verbs, only an admin purges dead letters or sees who
has access; the pages hide the verbs a user's role cannot use, and the audit log names the
real user. The single user and token of the settings before roles stay admins."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from beatflow.settings.accounts import hash_password, hash_token
from tests.cluster import Cluster
from tests.web.conftest import PASSWORD, TOKEN, USER, WebServer, serve
from tests.web.test_browser import WAIT_MS, shot
from tests.web.test_browser import browser as browser  # the Chromium fixture, shared

pytestmark = pytest.mark.slow

VIEWER_TOKEN = "viewer-token-0123456789abcdef"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
USERS = {"vera": ("viewer", "vera's long password"), "otto": ("operator", "otto's long password")}
RUN = "/api/v1/dags/web_etl/runs/nosuch"
# every API change, with a body an operator's call would pass validation with
CHANGES = [
    ("/api/v1/dags/web_etl/pause", {}),
    ("/api/v1/dags/web_etl/unpause", {}),
    ("/api/v1/dags/web_etl/runs", {"conf": {"rows": 1}}),
    (f"{RUN}/cancel", {}),
    (f"{RUN}/clear", {}),
    (f"{RUN}/mark", {"state": "success"}),
    ("/api/v1/dead-letters/1/replay", {}),
    ("/api/v1/dead-letters/purge", {"dag_id": "web_etl"}),
]
PAGE_CHANGES = [
    "/dags/web_etl/pause",
    "/dags/web_etl/trigger",
    "/dags/web_etl/runs/nosuch/cancel",
    "/dags/web_etl/runs/nosuch/clear",
    "/dags/web_etl/runs/nosuch/mark",
    "/dead-letters/1/replay",
]


@pytest.fixture(scope="module")
def roles_web(
    web_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    """The app with users and tokens read from files through the settings' _FILE variables."""
    tmp = tmp_path_factory.mktemp("roles")
    users = tmp / "users"
    users.write_text(
        "# name:role:password-hash\n"
        + "".join(f"{n}:{r}:{hash_password(p)}\n" for n, (r, p) in USERS.items())
    )
    tokens = tmp / "tokens"
    tokens.write_text(
        f"ro:viewer:{hash_token(VIEWER_TOKEN)}\n"
        f"ops:operator:{hash_token(OPERATOR_TOKEN)}\n"
        f"root:admin:{hash_token(ADMIN_TOKEN)}\n"
    )
    from_files = Settings.from_env(
        {"BEATFLOW_WEB_USERS_FILE": str(users), "BEATFLOW_WEB_TOKEN_HASHES_FILE": str(tokens)}
    )
    settings = runtime_of(web_cluster.app).settings.replace(
        web_user=USER,
        web_password=PASSWORD,
        web_tokens=f"ci:{TOKEN}",
        web_users=from_files.web_users,
        web_token_hashes=from_files.web_token_hashes,
    )
    server = serve(settings, web_cluster)
    try:
        yield server
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=10)


def login(web: WebServer, user: str, password: str) -> tuple[httpx.Client, str]:
    c = web.client(token=None, follow_redirects=False)
    form = c.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    r = c.post("/login", data={"username": user, "password": password, "csrf_token": token})
    assert r.status_code == 303, r.text
    page = c.get("/")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    return c, csrf


def runs_of(web: WebServer) -> list[str]:
    with web.client(ADMIN_TOKEN) as c:
        body = c.get("/api/v1/runs", params={"dag_id": "web_etl", "limit": 200}).json()
    return [r["run_id"] for r in body["runs"]]


def test_a_viewer_token_reads_but_cannot_trigger_or_change_anything(roles_web: WebServer) -> None:
    before = runs_of(roles_web)
    with roles_web.client(VIEWER_TOKEN) as c:
        me = c.get("/api/v1/me").json()
        assert me == {
            "actor": "token:ro",
            "name": "ro",
            "via": "token",
            "role": "viewer",
            "may": ["viewer"],
        }
        assert c.get("/api/v1/dags").status_code == 200
        assert c.get("/api/v1/dags/web_etl/runs").status_code == 200
        r = c.post("/api/v1/dags/web_etl/runs", json={"conf": {"rows": 1}})
        assert r.status_code == 403, r.text
        assert r.headers["content-type"] == "application/json"
        body = r.json()
        assert body["status"] == 403 and body["role"] == "viewer" and body["needed"] == "operator"
        assert "token:ro has the viewer role" in body["error"] and "trigger" in body["error"]
        for path, payload in CHANGES:
            answer = c.post(path, json=payload)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json()["role"] == "viewer", path
    assert runs_of(roles_web) == before  # nothing was enqueued
    with roles_web.client(ADMIN_TOKEN) as c:
        assert c.get("/api/v1/dags/web_etl").json()["paused"] is False


def test_an_operator_runs_verbs_but_only_an_admin_purges_or_lists_access(
    roles_web: WebServer,
) -> None:
    with roles_web.client(OPERATOR_TOKEN) as c:
        run = c.post("/api/v1/dags/web_etl/runs", json={"conf": {"rows": 1}, "reason": "ops"})
        assert run.status_code == 201, run.text
        assert c.post("/api/v1/dags/web_etl/pause").status_code == 200
        assert c.post("/api/v1/dags/web_etl/unpause").status_code == 200
        purge = c.post("/api/v1/dead-letters/purge", json={"dag_id": "web_etl"})
        assert purge.status_code == 403, purge.text
        assert purge.json()["needed"] == "admin" and purge.json()["role"] == "operator"
        assert c.get("/api/v1/access").status_code == 403
    roles_web.wait_run("web_etl", run.json()["run_id"])
    with roles_web.client(ADMIN_TOKEN) as c:
        done = c.post("/api/v1/dead-letters/purge", json={"dag_id": "web_etl", "reason": "tidy"})
        assert done.status_code == 200, done.text
        assert done.json() == {"dag_id": "web_etl", "deleted": 0}
        access = c.get("/api/v1/access").json()
        audit = c.get("/api/v1/audit", params={"dag_id": "web_etl"}).json()["audit"]
    assert access["users"] == [
        {"name": USER, "role": "admin"},
        {"name": "otto", "role": "operator"},
        {"name": "vera", "role": "viewer"},
    ]
    assert {"name": "ro", "role": "viewer"} in access["tokens"]
    assert {"name": "ci", "role": "admin"} in access["tokens"]  # BEATFLOW_WEB_TOKENS: admins
    assert "sha256" not in str(access) and "scrypt" not in str(access)
    assert [(a["action"], a["actor"]) for a in audit[:4]] == [
        ("purge", "token:root"),
        ("unpause", "token:ops"),
        ("pause", "token:ops"),
        ("trigger", "token:ops"),
    ]


def test_the_user_and_token_of_the_settings_before_roles_are_admins(roles_web: WebServer) -> None:
    with roles_web.client(TOKEN) as c:
        assert c.get("/api/v1/me").json()["role"] == "admin"
        assert c.get("/api/v1/access").status_code == 200
    c, csrf = login(roles_web, USER, PASSWORD)
    with closing(c):
        me = c.get("/api/v1/me").json()
        assert (me["actor"], me["role"]) == (f"user:{USER}", "admin")


def test_a_viewer_session_sees_no_verbs_and_its_forms_are_refused_with_a_page(
    roles_web: WebServer,
) -> None:
    c, csrf = login(roles_web, "vera", USERS["vera"][1])
    with closing(c):
        page = c.get("/dags/web_etl")
        assert page.status_code == 200
        assert re.search(r'id="who">vera <span class="badge role-viewer"', page.text)
        assert "Trigger run" not in page.text and 'action="/dags/web_etl/pause"' not in page.text
        assert 'id="read-only"' in page.text
        for path in PAGE_CHANGES:
            r = c.post(
                path,
                data={"csrf_token": csrf, "paused": "true", "conf": "{}", "reason": "x"},
                headers={"Accept": "text/html"},
            )
            assert r.status_code == 403, (path, r.text)
            assert "text/html" in r.headers["content-type"], path
            assert "Not allowed" in r.text and "needs operator" in r.text, path
        api = c.post("/api/v1/dags/web_etl/pause", headers={"X-CSRF-Token": csrf})
        assert api.status_code == 403 and api.json()["role"] == "viewer"
        out = c.post("/logout", data={"csrf_token": csrf})  # a viewer may log out
        assert out.status_code == 303 and out.headers["location"] == "/login"


def test_an_operator_user_from_the_file_triggers_from_the_page_and_is_audited_by_name(
    roles_web: WebServer,
) -> None:
    c, csrf = login(roles_web, "otto", USERS["otto"][1])
    with closing(c):
        page = c.get("/dags/web_etl")
        assert "Trigger run" in page.text and 'id="read-only"' not in page.text
        assert 'class="badge role-operator"' in page.text
        r = c.post("/dags/web_etl/trigger", data={"csrf_token": csrf, "conf": '{"rows": 2}'})
        assert r.status_code == 303, r.text
        run_id = unquote(r.headers["location"].rsplit("/", 1)[1])
    roles_web.wait_run("web_etl", run_id)
    with roles_web.client(ADMIN_TOKEN) as t:
        found = t.get("/api/v1/audit", params={"dag_id": "web_etl", "run_id": run_id})
    assert found.status_code == 200, found.text
    audit = found.json()["audit"]
    assert [(a["action"], a["actor"]) for a in audit] == [("trigger", "user:otto")]


def test_wrong_passwords_and_unknown_users_are_refused_alike(roles_web: WebServer) -> None:
    for user, password in (("vera", "otto's long password"), ("nobody", "whatever it is")):
        c = roles_web.client(token=None, follow_redirects=False)
        with closing(c):
            form = c.get("/login")
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
            r = c.post("/login", data={"username": user, "password": password, "csrf_token": token})
            assert r.status_code == 401 and "wrong user name or password" in r.text
            assert "bf_session" not in r.cookies


def test_in_a_browser_a_viewer_sees_their_name_and_role_and_no_verbs(
    browser: object, roles_web: WebServer, tmp_path: Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        page.goto(roles_web.url + "/dags/web_etl")
        page.fill("input[name=username]", "vera")
        page.fill("input[name=password]", USERS["vera"][1])
        page.click("button[type=submit]")
        page.wait_for_selector("#who-role")
        assert page.inner_text("#who").split() == ["vera", "viewer"]
        assert page.locator("#read-only").is_visible()
        assert page.locator("text=Trigger run").count() == 0
        assert page.locator("form[action$='/pause']").count() == 0
        shot(page, tmp_path, "roles-viewer-dag")
        page.goto(roles_web.url + "/dead-letters")
        assert page.locator("text=Replay…").count() == 0
    finally:
        context.close()


def test_a_changed_role_applies_at_once_and_a_removed_user_is_logged_out(
    web_cluster: Cluster,
) -> None:
    from beatflow.settings.accounts import Role
    from beatflow.web.auth import Auth

    hashed = hash_password(USERS["vera"][1])
    base = runtime_of(web_cluster.app).settings.replace(web_secret_key="k" * 32)
    before = Auth(base.replace(web_users=f"vera:viewer:{hashed}"))
    cookie = before.new_session("vera", Role.ADMIN)  # a password user's role is not taken
    who = before.read_session(cookie)
    assert who is not None and (who.actor, who.role) == ("user:vera", Role.VIEWER)
    promoted = Auth(base.replace(web_users=f"vera:operator:{hashed}"))  # after a restart
    who = promoted.read_session(cookie)
    assert who is not None and who.role is Role.OPERATOR
    removed = Auth(base.replace(web_users=f"otto:operator:{hashed}"))
    assert removed.read_session(cookie) is None


@pytest.mark.parametrize("target", ["/\\evil.example/x", "/\\/evil.example"])
def test_a_login_never_sends_the_browser_to_another_site(roles_web: WebServer, target: str) -> None:
    c = roles_web.client(token=None, follow_redirects=False)
    with closing(c):
        form = c.get("/login", params={"next": target})
        assert "evil" not in form.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        r = c.post(
            "/login",
            data={"username": USER, "password": PASSWORD, "csrf_token": token, "next": target},
        )
        assert r.status_code == 303 and r.headers["location"] == "/"
