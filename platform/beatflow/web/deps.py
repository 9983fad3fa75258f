"""Request plumbing shared by the API and the pages: the runtime and credentials hung on the
app, the authenticated caller, JSON bodies parsed with clear errors."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import Request

from beatflow.runtime import Runtime
from beatflow.scheduler.folder import folder_signature
from beatflow.web.auth import CSRF_HEADER, SAFE_METHODS, Auth, Principal, csrf_ok
from beatflow.web.limits import ApiError

log = logging.getLogger(__name__)


class DagsWatcher:
    """Reloads the dags folder when a module changed (checked at most every
    BEATFLOW_SCHEDULE_SYNC_INTERVAL seconds), so the pages show new and changed DAGs and
    broken modules without a restart, as the beat picks them up."""

    def __init__(self, rt: Runtime) -> None:
        self.runtime = rt
        self.folder = Path(rt.settings.dags_folder)
        self.every = rt.settings.schedule_sync_interval
        self._next = time.monotonic() + self.every
        self._signature = folder_signature(self.folder)
        self._lock = threading.Lock()

    def check(self) -> None:
        if time.monotonic() < self._next or not self._lock.acquire(blocking=False):
            return
        try:
            self._next = time.monotonic() + self.every
            signature = folder_signature(self.folder)
            if signature != self._signature:
                self._signature = signature
                bag = self.runtime.reload()
                log.info("dags folder changed: %d DAGs, %d broken", len(bag.dags), len(bag.errors))
        finally:
            self._lock.release()


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    watcher: DagsWatcher | None = getattr(request.app.state, "dags_watcher", None)
    if watcher is not None:
        watcher.check()
    return rt


def auth_of(request: Request) -> Auth:
    auth: Auth = request.app.state.auth
    return auth


def api_user(request: Request) -> Principal:
    """The API's caller (bearer token or session); a session's change needs X-CSRF-Token."""
    who = auth_of(request).authenticate(request)
    if who is None:
        raise ApiError(
            401,
            "authentication required: send Authorization: Bearer <token> "
            "(BEATFLOW_WEB_TOKENS) or log in at /login",
        )
    if request.method not in SAFE_METHODS and not csrf_ok(
        who, request, request.headers.get(CSRF_HEADER)
    ):
        raise ApiError(403, "CSRF check failed: send the X-CSRF-Token header from the same origin")
    return who


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty); 400 for anything else."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "body is not UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise ApiError(
            400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"body must be a JSON object, got {type(data).__name__}")
    return data


def only(body: dict[str, Any], *names: str) -> None:
    """400 for a body field the route does not know (a typo must not be silently ignored)."""
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise ApiError(
            400, f"unknown field(s) {', '.join(unknown)}; expected: {', '.join(names) or 'none'}"
        )


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is default:
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ApiError(400, f'"{name}" must be {names}, got {type(value).__name__}')
    return value


def conf_from(value: Any) -> dict[str, Any] | None:
    """A trigger's conf: a JSON object, or a string holding one (as the CLI's --conf)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ApiError(
                400, f"conf is not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
    if not isinstance(value, dict):
        raise ApiError(400, 'conf must be a JSON object, e.g. {"limit": 10}')
    return value
