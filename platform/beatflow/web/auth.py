"""Who is asking, and with which role: bearer tokens for machines, a server-side session for
people (its id in a signed HttpOnly, SameSite=Strict cookie: see sessions.py), CSRF tokens for
cookie-authenticated changes. Users and tokens come from the settings: BEATFLOW_WEB_USER and
BEATFLOW_WEB_PASSWORD, BEATFLOW_WEB_TOKENS (admins, as before roles), BEATFLOW_WEB_USERS and
BEATFLOW_WEB_TOKEN_HASHES (each with its role), and OIDC logins (see oidc.py). Every comparison
of a secret is constant-time (``hmac.compare_digest``)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from beatflow.settings import Settings, parse_tokens
from beatflow.settings.accounts import (
    Role,
    hash_password,
    hash_token,
    parse_token_hashes,
    parse_users,
    verify_password,
)
from beatflow.web.oidc import OidcClient
from beatflow.web.sessions import SessionStore

SESSION_COOKIE = "bf_session"
LOGIN_COOKIE = "bf_login"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_FAILURES = 10  # failed logins from one address within LOGIN_WINDOW before it must wait
LOGIN_WINDOW = 60.0
# what each role adds, for the answer to a caller whose role lacks it
ROLE_WORDS = {
    Role.VIEWER: "read pages and the GET API",
    Role.OPERATOR: "run verbs: trigger, pause, unpause, cancel, clear, mark, replay",
    Role.ADMIN: "admin actions: purging dead letters and seeing who has access",
}


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: ``actor`` is what the audit log records (``user:<name>``,
    ``oidc:<name>`` or ``token:<name>``), ``role`` what it may do."""

    actor: str
    via: str  # "token" or "session"
    csrf: str = ""  # the session's CSRF token (sessions only)
    role: Role = Role.VIEWER  # the least, unless said

    @property
    def name(self) -> str:
        return self.actor.partition(":")[2] or self.actor

    def can(self, role: Role) -> bool:
        return self.role >= role


class Auth:
    """Credentials of one web process, from Settings (the secret key is random per process
    when BEATFLOW_WEB_SECRET_KEY is unset: sessions then end when the process restarts).
    Sessions live in beatflow's Redis (BEATFLOW_REDIS_URL, else the broker's)."""

    def __init__(self, settings: Settings) -> None:
        # name -> (role, password hash); the BEATFLOW_WEB_PASSWORD user is an admin (its
        # password hashed here, so every login takes the same path and the same time)
        self.users: dict[str, tuple[Role, str]] = {
            u.name: (u.role, u.secret_hash) for u in parse_users(settings.web_users)
        }
        if settings.web_password:
            self.users[settings.web_user] = (Role.ADMIN, hash_password(settings.web_password, 0))
        self._dummy_hash = hash_password(secrets.token_urlsafe(16))  # for unknown names
        # (sha256 of the token, name, role); BEATFLOW_WEB_TOKENS' tokens are admins
        self._tokens = [
            (hashlib.sha256(t.encode()).digest(), n, Role.ADMIN)
            for n, t in parse_tokens(settings.web_tokens).items()
        ] + [
            (bytes.fromhex(t.secret_hash.partition("$")[2]), t.name, t.role)
            for t in parse_token_hashes(settings.web_token_hashes)
        ]
        self.token_names = [(name, role) for _, name, role in self._tokens]
        secret_key = settings.web_secret_key or secrets.token_urlsafe(32)
        self.sessions = SessionStore(
            settings.effective_redis_url,
            secret_key,
            idle_seconds=settings.web_session_idle_seconds,
            max_seconds=settings.web_session_max_seconds,
        )
        self.oidc = OidcClient(settings, secret_key) if settings.web_oidc_issuer else None
        self.oidc_enabled = self.oidc is not None
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

    def check_password(self, user: str, password: str) -> Role | None:
        """The user's role if ``password`` is theirs, else None (an unknown name costs the
        same hash, so timing tells nothing about which was wrong)."""
        role, hashed = self.users.get(user, (None, self._dummy_hash))
        ok = verify_password(password, hashed)
        return role if ok else None

    def check_token(self, token: str) -> tuple[str, Role] | None:
        """The token's name and role, or None."""
        found = None
        given = bytes.fromhex(hash_token(token).partition("$")[2])
        for digest, name, role in self._tokens:
            if hmac.compare_digest(given, digest):
                found = (name, role)
        return found

    # ------------------------------------------------------------------ sessions

    def new_session(self, user: str, role: Role = Role.VIEWER, source: str = "user") -> str:
        """The cookie value of a new session for ``user`` (``source``: "user" for a login
        with a password, whose role is looked up at each request; "oidc" for one through the
        OIDC provider, whose ``role`` is kept with the session)."""
        return self.sessions.create(user, role=role.label, source=source)

    def read_session(self, value: str | None) -> Principal | None:
        session = self.sessions.read(value)
        if session is None:
            return None
        if session.source == "oidc":
            try:
                role = Role.parse(session.role)
            except ValueError:
                return None
        else:  # a password user: the role as configured now; a user removed is logged out
            configured = self.users.get(session.user)
            if configured is None:
                return None
            role = configured[0]
        actor = f"{session.source}:{session.user}"
        return Principal(actor=actor, via="session", csrf=session.csrf, role=role)

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
            found = self.check_token(token.strip())
            if found is None:
                return None
            return Principal(actor=f"token:{found[0]}", via="token", role=found[1])
        return self.read_session(request.cookies.get(SESSION_COOKIE))


def role_refusal(who: Principal, needed: Role) -> str | None:
    """Why ``who`` may not do what needs ``needed`` (None: it may)."""
    if who.can(needed):
        return None
    return (
        f"{who.actor} has the {who.role.label} role; this needs {needed.label} "
        f"({ROLE_WORDS[needed]})"
    )


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
