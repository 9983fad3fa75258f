"""Who is asking: bearer tokens for machines, a server-side session for people (its id in a
signed HttpOnly, SameSite=Strict cookie: see sessions.py), CSRF tokens for cookie-authenticated
changes. Every comparison of a secret is constant-time (``hmac.compare_digest``)."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from beatflow.settings import Settings, parse_tokens
from beatflow.web.sessions import SessionStore

SESSION_COOKIE = "bf_session"
LOGIN_COOKIE = "bf_login"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_FAILURES = 10  # failed logins from one address within LOGIN_WINDOW before it must wait
LOGIN_WINDOW = 60.0


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: ``actor`` is what the audit log records."""

    actor: str
    via: str  # "token" or "session"
    csrf: str = ""  # the session's CSRF token (sessions only)


class Auth:
    """Credentials of one web process, from Settings (the secret key is random per process
    when BEATFLOW_WEB_SECRET_KEY is unset: sessions then end when the process restarts).
    Sessions live in beatflow's Redis (BEATFLOW_REDIS_URL, else the broker's)."""

    def __init__(self, settings: Settings) -> None:
        self.user = settings.web_user
        self._password = settings.web_password.encode()
        self._tokens = [(n, t.encode()) for n, t in parse_tokens(settings.web_tokens).items()]
        self.sessions = SessionStore(
            settings.effective_redis_url,
            settings.web_secret_key or secrets.token_urlsafe(32),
            idle_seconds=settings.web_session_idle_seconds,
            max_seconds=settings.web_session_max_seconds,
        )
        self._failures: dict[str, list[float]] = {}
        self._failures_lock = threading.Lock()

    # ------------------------------------------------------------------ login throttling

    def login_allowed(self, client: str) -> bool:
        """False while ``client`` has LOGIN_FAILURES failed logins within LOGIN_WINDOW seconds
        (per process: a brake on password guessing, not an account lock-out)."""
        now = time.monotonic()
        with self._failures_lock:
            recent = [t for t in self._failures.get(client, ()) if now - t < LOGIN_WINDOW]
            if recent:
                self._failures[client] = recent
            else:
                self._failures.pop(client, None)
            return len(recent) < LOGIN_FAILURES

    def login_failed(self, client: str) -> None:
        with self._failures_lock:
            if len(self._failures) > 10_000:  # bounded memory whoever knocks
                self._failures.clear()
            self._failures.setdefault(client, []).append(time.monotonic())

    # ------------------------------------------------------------------ checks

    def check_password(self, user: str, password: str) -> bool:
        # both compared whatever the first says, so timing tells nothing about which was wrong
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        password_ok = hmac.compare_digest(password.encode(), self._password)
        return user_ok and password_ok

    def check_token(self, token: str) -> str | None:
        """The token's name, or None."""
        found = None
        given = token.encode()
        for name, expected in self._tokens:
            if hmac.compare_digest(given, expected):
                found = name
        return found

    # ------------------------------------------------------------------ sessions

    def new_session(self, user: str) -> str:
        """The cookie value of a new session for ``user``."""
        return self.sessions.create(user)

    def read_session(self, value: str | None) -> Principal | None:
        session = self.sessions.read(value)
        if session is None:
            return None
        return Principal(actor=f"user:{session.user}", via="session", csrf=session.csrf)

    def end_session(self, value: str | None) -> None:
        self.sessions.end(value)

    def login_token(self) -> str:
        """A pre-session CSRF token for the login form (double-submit: cookie and field)."""
        return secrets.token_urlsafe(24)

    # ------------------------------------------------------------------ requests

    def authenticate(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            name = self.check_token(token.strip())
            return None if name is None else Principal(actor=f"token:{name}", via="token")
        return self.read_session(request.cookies.get(SESSION_COOKIE))


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site (the host of Origin, or
    of Referer when Origin is absent, differs from Host); True when neither header is sent
    (non-browser clients). The scheme is not compared: behind a TLS-terminating proxy the page
    is https while this process sees http."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True
    host = request.headers.get("host", "").lower()
    return bool(host) and urlsplit(origin).netloc.lower() == host


def csrf_ok(principal: Principal, request: Request, given: str | None) -> bool:
    """A cookie-authenticated change needs the session's CSRF token and a same-origin request;
    a bearer-token request carries no ambient credential and needs neither."""
    if principal.via == "token":
        return True
    if not given or not same_origin(request):
        return False
    return hmac.compare_digest(given.encode(), principal.csrf.encode())
