"""create_web_app(settings): the FastAPI app, its error handlers, security headers and the one
unauthenticated route (/healthz)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from beatflow.errors import SettingsError
from beatflow.runtime import Runtime
from beatflow.settings import Settings
from beatflow.web.auth import Auth
from beatflow.web.deps import DagsWatcher, api_user
from beatflow.web.limits import MAX_BODY_BYTES, ApiError, BodyLimit

log = logging.getLogger(__name__)


def create_web_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    """The web app for ``settings`` (a user is required, by BEATFLOW_WEB_PASSWORD,
    BEATFLOW_WEB_USERS or an OIDC provider: nothing is served without credentials);
    ``runtime`` defaults to a new Celery app's (DAGs load on first use)."""
    if not (settings.web_password or settings.web_users or settings.web_oidc_issuer):
        raise SettingsError(
            [
                "BEATFLOW_WEB_PASSWORD (or BEATFLOW_WEB_PASSWORD_FILE) is required: `beatflow web` "
                "serves nothing without credentials; set a password for the login page (or "
                "users in BEATFLOW_WEB_USERS, or an OIDC provider in BEATFLOW_WEB_OIDC_ISSUER)"
            ]
        )
    if runtime is None:
        from beatflow.app import create_app
        from beatflow.runtime import runtime_of

        runtime = runtime_of(create_app(settings, load_dags=False))
    from beatflow.web import api, pages

    app = FastAPI(
        title="beatflow",
        version="1",
        docs_url=None,  # Swagger UI would load from a CDN; the document itself is served below
        redoc_url=None,
        openapi_url=None,
        generate_unique_id_function=_operation_id,
    )
    app.state.runtime = runtime
    app.state.dags_watcher = DagsWatcher(runtime)
    app.state.auth = Auth(settings)
    app.state.settings = settings

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.openapi = lambda: api.openapi_document(app)  # type: ignore[method-assign]

    @app.get("/api/v1/openapi.json", include_in_schema=False, dependencies=[Depends(api_user)])
    def openapi() -> dict[str, Any]:
        return app.openapi()

    app.include_router(api.router)
    app.include_router(pages.router)

    add_error_handlers(app)
    app.add_middleware(SecurityHeaders)
    # outermost: before anything reads
    app.add_middleware(
        BodyLimit, max_bytes=MAX_BODY_BYTES, html_page=pages.error_page, wants_html=_wants_html
    )
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Errors as JSON for the API (``{"error", "status"}``), as HTML pages with the way back
    for a person's browser (pages asking for text/html); a page without a session goes to
    the login form."""
    from beatflow.web import pages

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if exc.status == 401 and _wants_html(request):
            return pages.login_redirect(request)
        if _wants_html(request):
            return pages.error_page(request, exc.status, exc.message)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        body = {"error": exc.message, "status": exc.status, **exc.extra}
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        if _wants_html(request):
            if exc.status_code == 405:
                message = "this address takes a form, not a visit: go back and submit it again"
            return pages.error_page(request, exc.status_code, message)
        return JSONResponse({"error": message, "status": exc.status_code}, exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        if _wants_html(request):
            return pages.error_page(request, 400, validation_message(exc.errors()))
        return JSONResponse({"error": validation_message(exc.errors()), "status": 400}, 400)


def _operation_id(route: APIRoute) -> str:
    """The operation's id in the OpenAPI document: the route function's name (a generated
    client's function names: trigger_run, get_run ...)."""
    return route.name


def validation_message(errors: Sequence[Any]) -> str:
    """One line for FastAPI's validation errors: unknown body fields named first (a typo must
    not pass silently), then each problem where it is (the input itself is never echoed)."""
    unknown = [str(e["loc"][-1])[:100] for e in errors if e.get("type") == "extra_forbidden"]
    problems = [
        f"{'.'.join(str(p)[:100] for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
        for e in errors
        if e.get("type") != "extra_forbidden"
    ]
    if unknown:
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        problems.insert(0, f"unknown field(s) {', '.join(unknown[:10])}{more}")
    return "invalid request: " + "; ".join(problems[:20])


def _wants_html(request: Request) -> bool:
    from beatflow.web.pages.errors import wants_html

    return wants_html(request)


class SecurityHeaders:
    """CSP (scripts and styles from this origin only, inline styles by nonce), no framing,
    no sniffing, no caching of authenticated pages."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(12)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        csp = (
            "default-src 'none'; script-src 'self'; "
            f"style-src 'self' 'nonce-{nonce}'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", csp.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
