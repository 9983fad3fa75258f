"""Server-side sessions: the cookie holds only a random session id, signed and timestamped with
itsdangerous; the session itself (user, CSRF token, login time) lives in Redis, so logging out
ends it for good, and it ends on its own when idle (the key's TTL, renewed on use) or old."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from itsdangerous import BadSignature, URLSafeTimedSerializer

from beatflow.connections import redis_client
from beatflow.web.limits import ApiError

KEY_PREFIX = "beatflow:web:session:"
SALT = "beatflow-web-session"
REDIS_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Session:
    """One login: ``csrf`` is the token its forms and API changes must carry."""

    user: str
    csrf: str
    created: float
    role: str = "viewer"  # what an OIDC login was given (a password user's is looked up)
    source: str = "user"  # "user" (a password login) or "oidc"


class SessionStore:
    """Sessions of the web processes sharing one Redis and one secret key."""

    def __init__(
        self, redis_url: str, secret_key: str, *, idle_seconds: int, max_seconds: int
    ) -> None:
        self.idle_seconds = idle_seconds
        self.max_seconds = max_seconds
        self._signer = URLSafeTimedSerializer(secret_key, salt=SALT)
        self._redis_url = redis_url
        self._client: redis.Redis | None = None

    @property
    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis_client(self._redis_url, timeout=REDIS_TIMEOUT)
        return self._client

    def create(self, user: str, *, role: str = "viewer", source: str = "user") -> str:
        """A new session for ``user``: the cookie value to hand out."""
        session_id = secrets.token_urlsafe(32)
        with _unavailable_is_503():
            pipe = self._redis.pipeline()
            pipe.hset(
                KEY_PREFIX + session_id,
                mapping={
                    "user": user,
                    "csrf": secrets.token_urlsafe(24),
                    "created": time.time(),
                    "role": role,
                    "source": source,
                },
            )
            pipe.expire(KEY_PREFIX + session_id, self.idle_seconds)
            pipe.execute()
        return self._signer.dumps(session_id)

    def read(self, cookie: str | None) -> Session | None:
        """The live session the cookie names (and its idle clock restarted), or None: a cookie
        not signed by this key, older than max_seconds, logged out or idle too long."""
        session_id = self._session_id(cookie)
        if session_id is None:
            return None
        key = KEY_PREFIX + session_id
        with _unavailable_is_503():
            data = self._redis.hgetall(key)
            if not data:
                return None
            try:
                session = Session(
                    str(data["user"]),
                    str(data["csrf"]),
                    float(data["created"]),
                    str(data.get("role", "viewer")),
                    str(data.get("source", "user")),
                )
            except (KeyError, ValueError):
                return None
            left = session.created + self.max_seconds - time.time()
            if left <= 0:
                self._redis.delete(key)
                return None
            self._redis.expire(key, max(1, int(min(self.idle_seconds, left))))
        return session

    def end(self, cookie: str | None) -> None:
        """Log the session out: its cookie is refused from now on, wherever it is replayed."""
        session_id = self._session_id(cookie)
        if session_id is not None:
            with _unavailable_is_503():
                self._redis.delete(KEY_PREFIX + session_id)

    def _session_id(self, cookie: str | None) -> str | None:
        if not cookie or len(cookie) > 4096:
            return None
        try:
            session_id = self._signer.loads(cookie, max_age=self.max_seconds)
        except BadSignature:  # SignatureExpired too
            return None
        return session_id if isinstance(session_id, str) and len(session_id) < 100 else None


@contextmanager
def _unavailable_is_503() -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise ApiError(503, f"the session store (Redis) is unavailable: {exc}") from exc
