"""What every page shares: the router (outside the OpenAPI document), the logged-in user,
rendering with the CSP nonce and CSRF token, redirects. Assets come from the package."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context

from beatflow.settings.accounts import Role
from beatflow.web.auth import SAFE_METHODS, Principal, csrf_ok
from beatflow.web.deps import auth_of, require_role
from beatflow.web.limits import ApiError

HERE = Path(__file__).resolve().parent.parent
STATIC = HERE / "static"
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes .html


def utc_text(iso: str | datetime | None, ms: bool = False, short: bool = False) -> str:
    """Every date the pages show, one way: ``YYYY-MM-DD HH:MM:SS UTC`` (the page's toggle
    rewrites it to local time from the <time> element's datetime); ``short``, where room is
    scarce (the grid's columns), ``MM-DD HH:MM`` with the whole date in the element's title."""
    if not iso:
        return "–"
    try:
        value = iso if isinstance(iso, datetime) else datetime.fromisoformat(iso)
    except ValueError:
        return str(iso)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    if short:
        return value.strftime("%m-%d %H:%M")
    fraction = f".{value.microsecond // 1000:03d}" if ms else ""
    return value.strftime("%Y-%m-%d %H:%M:%S") + fraction + " UTC"


templates.env.filters["utc"] = utc_text


@pass_context
def in_dags_folder(ctx: Any, path: str | None) -> str:
    """A DAG file's path as its author knows it: inside the dags folder, from the folder's
    name (``dags/etl.py``); any other path as it is."""
    if not path:
        return ""
    try:
        folder = ctx["request"].app.state.runtime.settings.dags_path.resolve()
        return str(Path(folder.name) / Path(path).resolve().relative_to(folder))
    except (KeyError, AttributeError, ValueError, OSError):
        return path


templates.env.filters["in_dags"] = in_dags_folder
templates.env.filters["json_text"] = lambda value: json.dumps(value, ensure_ascii=False)

router = APIRouter(include_in_schema=False)


# the one form a viewer posts
ANY_ROLE_POSTS = frozenset({"/logout"})


def page_user(request: Request) -> Principal:
    """The page's user; a form post needs the operator role at least (logging out aside: a
    form that needs more asks for it with ``require_role``)."""
    who = auth_of(request).authenticate(request)
    if who is None:
        raise ApiError(401, "log in first")
    if request.method not in SAFE_METHODS and request.url.path not in ANY_ROLE_POSTS:
        require_role(who, Role.OPERATOR)
    return who


PageUser = Annotated[Principal, Depends(page_user)]


def login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


def render(
    request: Request, name: str, who: Principal | None, status: int = 200, **ctx: Any
) -> HTMLResponse:
    ctx.update(
        request=request,
        csrf=who.csrf if who else "",
        user=who.name if who else None,
        role=who.role.label if who else None,
        can_operate=bool(who and who.can(Role.OPERATOR)),
        can_admin=bool(who and who.can(Role.ADMIN)),
        nonce=getattr(request.state, "csp_nonce", ""),
    )
    return templates.TemplateResponse(request, name, ctx, status_code=status)


def check_csrf(request: Request, who: Principal, token: str) -> None:
    if not csrf_ok(who, request, token):
        raise ApiError(403, "CSRF check failed: reload the page and submit the form again")


def back(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def safe_next(target: str) -> str:
    """``target`` if it is a path of this site, else "/": browsers read a backslash as a
    slash (``/\\evil.example`` is ``//evil.example``, another site) and drop tabs and newlines."""
    parts = urlsplit(target)
    if (
        not target.startswith("/")
        or target.startswith("//")
        or parts.scheme
        or parts.netloc
        or "\\" in target
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target)
    ):
        return "/"
    return target


@functools.cache
def app_css() -> str:
    """The stylesheet, for pages shown without a session (login, errors) to inline by nonce:
    a file of the package, so its template marks it safe (no user text ever goes there)."""
    return (STATIC / "app.css").read_text()


def reason_given(reason: str) -> str:
    """A verb's reason from a page's form: required (the form asks for it), kept in the audit
    trail, at most 500 characters."""
    reason = reason.strip()[:500]
    if not reason:
        raise ApiError(400, "give a reason: it is kept in the audit trail with your name")
    return reason


def display_json(value: Any) -> str:
    """JSON for people to read: characters as written (no \\u escapes; the template engine
    escapes for HTML), indented. Never marked safe."""
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)
