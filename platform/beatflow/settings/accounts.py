"""Who may use `beatflow web`, and how much: the roles (viewer < operator < admin), the users of
BEATFLOW_WEB_USERS (``name:role:password-hash`` lines) and the API tokens of
BEATFLOW_WEB_TOKEN_HASHES (``name:role:token-hash`` lines). No secret is kept in clear:

- a password hash is ``scrypt$<N>$<r>$<p>$<salt>$<key>`` (hashlib.scrypt, salt and key in
  unpadded URL-safe base64; ``beatflow web hash-password`` writes one);
- a token hash is ``sha256$<hex>`` (a token is 32 random bytes, so a fast hash is enough;
  ``beatflow web new-token`` makes one and prints its line).

Every comparison of a secret is constant-time."""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

NAME_RE = re.compile(r"^[A-Za-z0-9_.@\-]{1,100}$")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
SCRYPT_MAXMEM = 128 * 1024 * 1024
MAX_SCRYPT_N = 1 << 20
MIN_PASSWORD_CHARS = 8
MIN_TOKEN_CHARS = 16


class Role(enum.IntEnum):
    """What a caller may do; each role may do what the ones below it may."""

    VIEWER = 1  # read: pages and GET API
    OPERATOR = 2  # the run verbs: trigger, pause, cancel, clear, mark, replay
    ADMIN = 3  # everything, the destructive and the access-revealing too

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown role {text.strip()[:40]!r}; expected viewer, operator or admin"
            ) from None


@dataclass(frozen=True, slots=True)
class Account:
    """A user (``secret_hash`` a password hash) or an API token (a token hash)."""

    name: str
    role: Role
    secret_hash: str


# ---------------------------------------------------------------- passwords


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, min_chars: int = MIN_PASSWORD_CHARS) -> str:
    """A new salted scrypt hash of ``password`` in the format the users lines take."""
    if len(password) < min_chars:
        raise ValueError(f"a password needs at least {MIN_PASSWORD_CHARS} characters")
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(key)}"


def _check_password_hash(text: str) -> tuple[int, int, int, bytes, bytes]:
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("a password hash is scrypt$N$r$p$salt$key (beatflow web hash-password)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, key = _unb64(parts[4]), _unb64(parts[5])
    except ValueError:
        raise ValueError("a password hash's N, r, p, salt or key is malformed") from None
    if n < 2 or n > MAX_SCRYPT_N or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ValueError(f"a password hash's N must be a power of 2 up to {MAX_SCRYPT_N}")
    if len(salt) < 8 or len(key) < 16 or 128 * r * n * p > SCRYPT_MAXMEM:
        raise ValueError("a password hash's salt or key is too short, or it needs too much memory")
    return n, r, p, salt, key


def verify_password(password: str, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed`` (False for a malformed hash)."""
    try:
        n, r, p, salt, key = _check_password_hash(hashed)
    except ValueError:
        return False
    given = hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAXMEM, dklen=len(key)
    )
    return hmac.compare_digest(given, key)


# ---------------------------------------------------------------- tokens


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


def _check_token_hash(text: str) -> None:
    scheme, _, digest = text.partition("$")
    if scheme != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError("a token hash is sha256$<64 hex digits> (beatflow web new-token)")


# ---------------------------------------------------------------- the lines


def _parse_lines(raw: str, what: str) -> list[Account]:
    accounts: list[Account] = []
    seen: set[str] = set()
    # one account a line (a list in one variable may use ',' instead: no hash holds one)
    for number, line in enumerate(re.split(r"[\n,]", raw), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, role, secret_hash = (part.strip() for part in (line.split(":", 2) + ["", ""])[:3])
        where = f"{what} entry {number}"
        if not NAME_RE.match(name):
            raise ValueError(
                f"{where}: expected name:role:hash, a name of letters, digits, '_', '-', '.', '@'"
            )
        try:
            account = Account(name, Role.parse(role), secret_hash)
            if what == "user":
                _check_password_hash(secret_hash)
            else:
                _check_token_hash(secret_hash)
        except ValueError as exc:
            raise ValueError(f"{where} ({name}): {exc}") from None
        if name in seen:
            raise ValueError(f"{where}: the {what} name {name!r} appears twice")
        seen.add(name)
        accounts.append(account)
    return accounts


def parse_users(raw: str) -> list[Account]:
    """BEATFLOW_WEB_USERS: ``name:role:scrypt$...`` lines (``#`` comments); ValueError names
    the entry that is wrong, never a hash."""
    return _parse_lines(raw, "user")


def parse_token_hashes(raw: str) -> list[Account]:
    """BEATFLOW_WEB_TOKEN_HASHES: ``name:role:sha256$...`` lines (``#`` comments)."""
    return _parse_lines(raw, "token")


def users_text(raw: str) -> str:
    """The setting's parser: the text, once every line is known good."""
    parse_users(raw)
    return raw.strip()


def token_hashes_text(raw: str) -> str:
    parse_token_hashes(raw)
    return raw.strip()


def role_map(raw: str) -> str:
    """BEATFLOW_WEB_OIDC_ROLE_MAP: ``claim-value:role`` pairs, comma-separated."""
    parse_role_map(raw)
    return raw.strip()


def parse_role_map(raw: str) -> dict[str, Role]:
    out: dict[str, Role] = {}
    for item in (i.strip() for i in raw.split(",") if i.strip()):
        value, sep, role = item.rpartition(":")
        if not sep or not value.strip():
            raise ValueError("expected comma-separated claim-value:role pairs, e.g. ops:operator")
        out[value.strip()] = Role.parse(role)
    return out


def role_or_empty(raw: str) -> str:
    return "" if not raw.strip() else Role.parse(raw).label
