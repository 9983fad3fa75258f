"""The login form (throttled per address, its own double-submit token), logout (the session
ends in the store, not only in the browser), the static assets behind login."""

from __future__ import annotations

import hmac

from fastapi import Form, Request
from fastapi.responses import Response

from beatflow.web.auth import LOGIN_COOKIE, SESSION_COOKIE, same_origin
from beatflow.web.deps import auth_of
from beatflow.web.limits import ApiError
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
    if not auth.check_password(username, password):
        auth.login_failed(client)
        return _login_page(request, next, "wrong user name or password", status=401)
    done = back(safe_next(next))
    done.set_cookie(
        SESSION_COOKIE,
        auth.new_session(username),
        max_age=auth.sessions.max_seconds,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    done.delete_cookie(LOGIN_COOKIE, path="/login")
    return done


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
