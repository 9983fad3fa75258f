"""The login form (throttled per address, its own double-submit token), the single sign-on
login through an OIDC provider when one is set, logout (the session ends in the store, not only
in the browser), the static assets behind login."""

from __future__ import annotations

import hmac

from fastapi import Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from beatflow.web.auth import LOGIN_COOKIE, SESSION_COOKIE, same_origin
from beatflow.web.deps import auth_of
from beatflow.web.limits import ApiError
from beatflow.web.oidc import STATE_COOKIE as OIDC_STATE_COOKIE
from beatflow.web.oidc import STATE_SECONDS as OIDC_STATE_SECONDS
from beatflow.web.pages.base import (
    STATIC,
    STATIC_TYPES,
    PageUser,
    app_css,
    back,
    check_csrf,
    render,
    router,
    safe_next,
)


@router.get("/login")
def login_form(request: Request, next: str = "/", error: str = "") -> Response:
    return _login_page(request, next)


def _login_page(request: Request, next: str, error: str = "", status: int = 200) -> Response:
    """The login form with a fresh form token, also set as a cookie scoped to /login."""
    token = auth_of(request).login_token()
    response = render(
        request,
        "login.html",
        None,
        status=status,
        next=safe_next(next),
        login_token=token,
        css=app_css(),
        error=error,
        oidc=auth_of(request).oidc_enabled,
        password_login=bool(auth_of(request).users),  # none: single sign-on only
    )
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=3600,
        httponly=True,
        samesite="strict",
        path="/login",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/login")
def login(
    request: Request,
    username: str = Form("", max_length=200),
    password: str = Form("", max_length=1000),
    csrf_token: str = Form("", max_length=200),
    next: str = Form("/", max_length=2000),
) -> Response:
    auth = auth_of(request)
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    if (
        not cookie
        or not hmac.compare_digest(cookie.encode(), csrf_token.encode())
        or not same_origin(request)
    ):
        raise ApiError(403, "login form expired or posted from another site: reload /login")
    client = request.client.host if request.client else "-"
    if not auth.login_allowed(client):
        raise ApiError(429, "too many failed logins from this address: wait a minute")
    role = auth.check_password(username, password)
    if role is None:
        auth.login_failed(client)
        return _login_page(request, next, "wrong user name or password", status=401)
    return logged_in(request, auth.new_session(username, role), next)


def logged_in(request: Request, session: str, next: str) -> Response:
    """The answer to a login: the session's cookie, on the way to ``next``."""
    done = back(safe_next(next))
    _set_session_cookie(request, done, session)
    done.delete_cookie(LOGIN_COOKIE, path="/login")
    return done


def _set_session_cookie(request: Request, response: Response, session: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session,
        max_age=auth_of(request).sessions.max_seconds,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


@router.get("/login/oidc")
def login_oidc(request: Request, next: str = "/") -> Response:
    """Off to the OIDC provider, with state, nonce and PKCE kept in a signed cookie that only
    the callback reads."""
    oidc = auth_of(request).oidc
    if oidc is None:
        raise ApiError(404, "single sign-on is not set up (BEATFLOW_WEB_OIDC_ISSUER)")
    where, state = oidc.start(_callback_uri(request), safe_next(next))
    response = RedirectResponse(where, status_code=303)
    response.set_cookie(
        OIDC_STATE_COOKIE,
        state,
        max_age=OIDC_STATE_SECONDS,
        httponly=True,
        samesite="lax",  # it must come back with the provider's redirect, a cross-site GET
        path="/login/oidc",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/login/oidc/callback")
def login_oidc_callback(
    request: Request,
    state: str = Query("", max_length=200),
    code: str = Query("", max_length=4000),
    error: str = Query("", max_length=200),
) -> Response:
    """The provider's answer: the ID token checked, the role mapped, a session begun."""
    auth = auth_of(request)
    if auth.oidc is None:
        raise ApiError(404, "single sign-on is not set up (BEATFLOW_WEB_OIDC_ISSUER)")
    if error or not code:
        raise ApiError(403, f"the single sign-on provider refused the login: {error or 'no code'}")
    login, next_url = auth.oidc.finish(
        request.cookies.get(OIDC_STATE_COOKIE), state, code, _callback_uri(request)
    )
    session = auth.new_session(login.name, login.role, source="oidc")
    # a page, not a redirect: the way here began at the provider (another site), so a browser
    # would not send the SameSite=Strict session cookie along a redirect; a navigation from
    # this page is same-site
    target = safe_next(next_url)
    response = render(request, "signed_in.html", None, target=target, css=app_css())
    _set_session_cookie(request, response, session)
    response.delete_cookie(OIDC_STATE_COOKIE, path="/login/oidc")
    return response


def _callback_uri(request: Request) -> str:
    return str(request.url_for("login_oidc_callback"))


@router.post("/logout")
def logout(request: Request, who: PageUser, csrf_token: str = Form("")) -> Response:
    check_csrf(request, who, csrf_token)
    auth_of(request).end_session(request.cookies.get(SESSION_COOKIE))
    response = back("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/static/favicon.svg")
def favicon() -> Response:
    """The one asset served without a session: the login and error pages show it too."""
    return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")


@router.get("/static/{name}")
def static(name: str, who: PageUser) -> Response:
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in STATIC_TYPES or not path.is_file():
        raise ApiError(404, "no such asset")
    return Response(path.read_bytes(), media_type=STATIC_TYPES[path.suffix])
