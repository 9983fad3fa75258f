"""Input limits at the edge: request bodies (a cap on bytes, checked before and while reading),
ids in paths (a safe character set and length, no path tricks), page sizes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 64 * 1024
MAX_PAGE = 200
ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+@~\-]{0,249}$")


class ApiError(Exception):
    """Raised when a request cannot be served: ``status`` and a message that says what to fix."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def check_id(value: str, what: str) -> str:
    """``value`` if it is a well-formed id; else a 400 naming the rule (and never the id's
    interpretation as a path: '/', '\\', '..', control characters are all refused)."""
    if not ID_RE.match(value) or ".." in value:
        raise ApiError(
            400,
            f"invalid {what}: 1-250 characters of letters, digits and _ . : + @ ~ - "
            "(starting with a letter, digit or _; no '..', '/' or spaces)",
        )
    return value


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(400, f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    return limit


class BodyLimit:
    """ASGI middleware: 413 for a body over ``max_bytes`` (by Content-Length, or counted as it
    streams in when the length is not declared). JSON for the API; a person's browser gets
    ``html_page(request, 413, message)`` when one is given (the error page with the way back)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_BODY_BYTES,
        html_page: Callable[[Request, int, str], Response] | None = None,
        wants_html: Callable[[Request], bool] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.html_page = html_page
        self.wants_html = wants_html

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = True
            if too_big:
                await self._refuse(scope, send)
                return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watch)
        except _TooLarge:
            if not started:
                await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = f"request body over the limit of {self.max_bytes} bytes"
        if self.html_page is not None and self.wants_html is not None:
            request = Request(scope)
            if self.wants_html(request):
                await self.html_page(request, 413, message)(scope, _no_body, send)
                return
        body = json.dumps({"error": message, "status": 413}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


async def _no_body() -> Message:
    return {"type": "http.disconnect"}
