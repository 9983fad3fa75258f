"""Single sign-on through an OpenID Connect provider that the test starts (tests/web/
oidc_provider.py: real HTTP, a real RS256-signed ID token), followed redirect by redirect: the
role comes from the groups claim through BEATFLOW_WEB_OIDC_ROLE_MAP, the audit names the user,
and a login the provider's answer does not prove (another key, another audience, no nonce, a
forged state, a replayed code, no mapped role) gets no session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from beatflow.runtime import runtime_of
from tests.cluster import Cluster
from tests.web.conftest import PASSWORD, TOKEN, USER, WebServer, serve
from tests.web.oidc_provider import CLIENT_ID, CLIENT_SECRET, Provider
from tests.web.test_browser import WAIT_MS, shot
from tests.web.test_browser import browser as browser  # the Chromium fixture, shared

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider().start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def sso_web(web_cluster: Cluster, provider: Provider) -> Iterator[WebServer]:
    settings = runtime_of(web_cluster.app).settings.replace(
        web_user=USER,
        web_password=PASSWORD,
        web_tokens=f"ci:{TOKEN}",
        web_oidc_issuer=provider.url,
        web_oidc_client_id=CLIENT_ID,
        web_oidc_client_secret=CLIENT_SECRET,
        web_oidc_role_claim="groups",
        web_oidc_role_map="beatflow-viewers:viewer,beatflow-ops:operator,beatflow-admins:admin",
    )
    server = serve(settings, web_cluster)
    try:
        yield server
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=10)


@pytest.fixture(autouse=True)
def honest_provider(provider: Provider) -> Iterator[None]:
    yield
    provider.sign_with_rogue_key = False
    provider.audience = CLIENT_ID
    provider.drop_nonce = False


def start_login(
    web: WebServer, provider: Provider, user: dict[str, object]
) -> tuple[httpx.Client, str]:
    """Log in page -> beatflow -> the provider -> back: the client and the callback URL."""
    provider.user = user
    c = httpx.Client(base_url=web.url, follow_redirects=False, timeout=30.0)
    page = c.get("/login", params={"next": "/dags/web_etl"})
    assert 'id="login-oidc"' in page.text
    href = re.search(r'id="login-oidc" href="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    to_provider = c.get(href.replace("&amp;", "&"))
    assert to_provider.status_code == 303, to_provider.text
    where = to_provider.headers["location"]
    assert where.startswith(f"{provider.url}/authorize?")
    query = parse_qs(urlsplit(where).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
    back = c.get(where)  # the provider, over real HTTP
    assert back.status_code == 302, back.text
    callback = back.headers["location"]
    assert callback.startswith(f"{web.url}/login/oidc/callback?")
    return c, callback


def finish_login(web: WebServer, provider: Provider, user: dict[str, object]) -> httpx.Client:
    c, callback = start_login(web, provider, user)
    done = c.get(callback)
    assert done.status_code == 200, done.text
    assert 'http-equiv="refresh" content="0;url=/dags/web_etl"' in done.text
    assert "bf_session" in done.cookies
    return c


def csrf_of(c: httpx.Client) -> str:
    page = c.get("/dags/web_etl")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]


def test_an_oidc_login_gets_the_role_its_groups_claim_maps_to_and_is_audited(
    sso_web: WebServer, provider: Provider
) -> None:
    user = {"sub": "u-1", "preferred_username": "carol", "groups": ["staff", "beatflow-ops"]}
    c = finish_login(sso_web, provider, user)
    with closing(c):
        me = c.get("/api/v1/me").json()
        assert (me["actor"], me["role"], me["via"]) == ("oidc:carol", "operator", "session")
        page = c.get("/dags/web_etl")
        assert "Trigger run" in page.text and 'class="badge role-operator"' in page.text
        csrf = csrf_of(c)
        run = c.post("/api/v1/dags/web_etl/runs", json={}, headers={"X-CSRF-Token": csrf})
        assert run.status_code == 201, run.text
        assert c.get("/api/v1/access").status_code == 403  # an operator, not an admin
    sso_web.wait_run("web_etl", run.json()["run_id"])
    with sso_web.client() as t:
        audit = t.get(
            "/api/v1/audit", params={"dag_id": "web_etl", "run_id": run.json()["run_id"]}
        ).json()["audit"]
    assert [(a["action"], a["actor"]) for a in audit] == [("trigger", "oidc:carol")]


def test_the_highest_mapped_role_wins_and_a_viewer_cannot_trigger(
    sso_web: WebServer, provider: Provider
) -> None:
    admin = finish_login(
        sso_web, provider, {"sub": "u-2", "preferred_username": "dana", "groups": "beatflow-admins"}
    )
    with closing(admin):
        assert admin.get("/api/v1/me").json()["role"] == "admin"
    viewer = finish_login(
        sso_web,
        provider,
        {"sub": "u-3", "preferred_username": "eve", "groups": ["beatflow-viewers"]},
    )
    with closing(viewer):
        csrf = csrf_of(viewer)
        r = viewer.post("/api/v1/dags/web_etl/runs", json={}, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 403 and r.json()["role"] == "viewer", r.text


@pytest.mark.parametrize("fault", ["rogue_key", "audience", "nonce"])
def test_an_id_token_the_provider_did_not_really_issue_for_us_gets_no_session(
    sso_web: WebServer, provider: Provider, fault: str
) -> None:
    provider.sign_with_rogue_key = fault == "rogue_key"
    provider.audience = "another-client" if fault == "audience" else CLIENT_ID
    provider.drop_nonce = fault == "nonce"
    user = {"sub": "u-4", "preferred_username": "mallory", "groups": ["beatflow-admins"]}
    c, callback = start_login(sso_web, provider, user)
    with closing(c):
        r = c.get(callback, headers={"Accept": "text/html"})
        assert r.status_code == 403, r.text
        assert "ID token is not valid" in r.text
        assert "bf_session" not in r.cookies
        assert c.get("/api/v1/me").status_code == 401


def test_a_forged_state_a_replayed_code_and_an_unmapped_user_get_no_session(
    sso_web: WebServer, provider: Provider
) -> None:
    user = {"sub": "u-5", "preferred_username": "frank", "groups": ["beatflow-ops"]}
    c, callback = start_login(sso_web, provider, user)
    with closing(c):
        forged = re.sub(r"state=[^&]+", "state=forged", callback)
        r = c.get(forged)
        assert r.status_code == 403 and "does not match" in r.json()["error"]
        assert c.get(callback).status_code == 200  # the real answer still works, once
        again = c.get(callback)  # the state cookie is gone and the code was used
        assert again.status_code == 403
    # a callback without the browser that began the login (another client, no state cookie)
    c2, callback2 = start_login(sso_web, provider, user)
    with closing(c2), httpx.Client(timeout=30.0) as stranger:
        stolen = stranger.get(callback2)
        assert stolen.status_code == 403 and "began elsewhere" in stolen.json()["error"]
    nobody = {"sub": "u-6", "preferred_username": "gina", "groups": ["staff"]}
    c3, callback3 = start_login(sso_web, provider, nobody)
    with closing(c3):
        r = c3.get(callback3)
        assert r.status_code == 403 and "gina has no beatflow role" in r.json()["error"]
        assert c3.get("/api/v1/me").status_code == 401


def test_with_single_sign_on_only_the_login_page_offers_no_password_form(
    web_cluster: Cluster, provider: Provider
) -> None:
    settings = runtime_of(web_cluster.app).settings.replace(
        web_password="",
        web_oidc_issuer=provider.url,
        web_oidc_client_id=CLIENT_ID,
        web_oidc_client_secret=CLIENT_SECRET,
        web_oidc_default_role="viewer",
    )
    server = serve(settings, web_cluster)
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as c:
            page = c.get("/login")
            assert 'id="login-oidc"' in page.text and 'name="password"' not in page.text
        user = {"sub": "u-7", "preferred_username": "hal", "groups": ["staff"]}
        c = finish_login(server, provider, user)
        with closing(c):
            me = c.get("/api/v1/me").json()
            assert (me["actor"], me["role"]) == ("oidc:hal", "viewer")  # the default role
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=10)


def test_in_a_browser_single_sign_on_from_another_site_lands_logged_in_with_the_role(
    browser: object, web_cluster: Cluster, tmp_path: Path
) -> None:
    """Chromium, with the provider on another site (localhost) than beatflow (127.0.0.1): the
    state cookie comes back on the provider's redirect, the SameSite=Strict session cookie is
    sent on the page's own navigation."""
    other_site = Provider(host_name="localhost").start()
    settings = runtime_of(web_cluster.app).settings.replace(
        web_password=PASSWORD,
        web_oidc_issuer=other_site.url,
        web_oidc_client_id=CLIENT_ID,
        web_oidc_client_secret=CLIENT_SECRET,
        web_oidc_role_map="beatflow-ops:operator",
    )
    server = serve(settings, web_cluster)
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    context.set_default_timeout(WAIT_MS)
    try:
        other_site.user = {"sub": "u-8", "preferred_username": "ivy", "groups": ["beatflow-ops"]}
        page = context.new_page()
        page.goto(server.url + "/dags/web_etl")
        assert "/login" in page.url
        page.click("#login-oidc")
        page.wait_for_selector("#who-role")
        assert page.url == server.url + "/dags/web_etl"
        assert page.inner_text("#who").split() == ["ivy", "operator"]
        # the trigger form (of its params) is there: an operator may trigger
        assert page.locator("form.trigger.params >> text=Trigger run").count() == 1
        shot(page, tmp_path, "oidc-operator-dag")
    finally:
        context.close()
        server.server.should_exit = True
        server.thread.join(timeout=10)
        other_site.stop()
