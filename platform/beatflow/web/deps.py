"""Request plumbing shared by the API and the pages: the runtime and credentials hung on the
app, the authenticated caller (and the security schemes the OpenAPI document names), JSON
bodies and confs parsed within limits with clear errors."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from beatflow.errors import JsonLimitError
from beatflow.records_json import loads_bounded
from beatflow.runtime import Runtime
from beatflow.scheduler.folder import folder_signature
from beatflow.settings.accounts import Role
from beatflow.web.auth import (
    CSRF_HEADER,
    SAFE_METHODS,
    SESSION_COOKIE,
    Auth,
    Principal,
    csrf_ok,
    role_refusal,
)
from beatflow.web.limits import MAX_BODY_BYTES, ApiError

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


bearer = HTTPBearer(
    scheme_name="bearer",
    auto_error=False,
    bearerFormat="token",
    description=(
        "a token of BEATFLOW_WEB_TOKENS (admin) or BEATFLOW_WEB_TOKEN_HASHES (its role): "
        "a viewer may GET, an operator may also change runs and DAGs, an admin anything"
    ),
)
session_cookie = APIKeyCookie(
    name=SESSION_COOKIE,
    scheme_name="session",
    auto_error=False,
    description="the session of a login at /login; changes also need the X-CSRF-Token header",
)


def api_user(
    request: Request,
    _token: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
    _session: Annotated[str | None, Security(session_cookie)] = None,
) -> Principal:
    """The API's caller (bearer token or session); a session's change needs X-CSRF-Token,
    and every change needs the operator role at least (a route may ask for more with
    ``admin_user``). (The two security parameters document the schemes; Auth reads the
    request itself.)"""
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
    if request.method not in SAFE_METHODS:
        require_role(who, Role.OPERATOR)
    return who


def require_role(who: Principal, needed: Role) -> Principal:
    """``who``, or a 403 saying which role the action needs and which one ``who`` has."""
    refusal = role_refusal(who, needed)
    if refusal is not None:
        raise ApiError(403, refusal, role=who.role.label, needed=needed.label)
    return who


def admin_user(
    request: Request,
    _token: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
    _session: Annotated[str | None, Security(session_cookie)] = None,
) -> Principal:
    """An API caller with the admin role (a route's dependency: the destructive actions)."""
    return require_role(api_user(request), Role.ADMIN)


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request's JSON object body, parsed within the size and depth limits; 400 naming the
    problem (or the limit) for anything else."""
    try:
        data = loads_bounded(raw, max_bytes=MAX_BODY_BYTES, what="body")
    except JsonLimitError as exc:
        raise ApiError(400, str(exc)) from None
    except UnicodeDecodeError:
        raise ApiError(400, "body is not UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise ApiError(
            400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"body must be a JSON object, got {type(data).__name__}")
    return data


def conf_from(value: Any) -> dict[str, Any] | None:
    """A trigger's conf: a JSON object, or a string holding one (as the CLI's --conf), parsed
    within the same limits as a body."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = loads_bounded(value, max_bytes=MAX_BODY_BYTES, what="conf")
        except JsonLimitError as exc:
            raise ApiError(400, str(exc)) from None
        except json.JSONDecodeError as exc:
            raise ApiError(
                400, f"conf is not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
    if not isinstance(value, dict):
        raise ApiError(400, 'conf must be a JSON object, e.g. {"limit": 10}')
    return value
