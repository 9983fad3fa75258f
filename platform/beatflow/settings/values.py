"""How each ``BEATFLOW_*`` variable's text becomes a value (every ValueError says the expected
form), and the helpers that show or normalise URLs: :func:`mask_url`, :func:`psycopg_url`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MASK = "****"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_USERINFO_PASSWORD_RE = re.compile(r"(://[^:@/;,?#]*:)[^;/?#]*@")
_QUERY_PASSWORD_RE = re.compile(r"([?&][a-z_]*password=)[^&;#]*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class FromText:
    """Field metadata: how the field's variable is read (only text from the environment is;
    a value given in Python is taken as it is)."""

    parse: Callable[[str], Any]


def mask_url(url: str) -> str:
    """Return ``url`` with every password replaced by ``****``: the userinfo of each host
    (also in kombu's ``sentinel://...;sentinel://...`` list) and ``password=`` query values."""
    masked = _USERINFO_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{MASK}@", url)
    return _QUERY_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{MASK}", masked)


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` holds a secret (shown as ``****``)."""
    return any(word in name for word in ("password", "secret", "token", "web_users"))


def psycopg_url(url: str) -> str:
    """A PostgreSQL URL as SQLAlchemy's psycopg 3 dialect takes it: ``postgres://`` (what
    Heroku-style providers hand out) and ``postgresql://`` become ``postgresql+psycopg://``;
    an explicit driver is kept; any other URL is returned unchanged."""
    scheme, sep, rest = url.partition("://")
    base, _, driver = scheme.partition("+")
    if not sep or base not in ("postgres", "postgresql"):
        return url
    return f"postgresql+{driver or 'psycopg'}://{rest}"


def parse_tokens(raw: str) -> dict[str, str]:
    """``name:token,name:token`` -> {name: token}; ValueError says what is wrong."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in raw.split(",") if i.strip()):
        name, sep, token = item.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not _NAME_RE.match(name) or len(token) < 16:
            raise ValueError(
                "expected comma-separated name:token pairs, names of letters, digits, '_', '-', "
                "'.', tokens of at least 16 characters"
            )
        if name in out:
            raise ValueError(f"token name {name!r} appears twice")
        out[name] = token
    return out


def is_redis_url(url: str) -> bool:
    """Whether ``url``'s scheme is one beatflow.connections reads (the one list of them)."""
    from beatflow.connections import SCHEMES  # lazy: connections is not needed to build values

    return urlsplit(url).scheme in SCHEMES


# ---------------------------------------------------------------- parsers, by kind of value


def text(raw: str) -> str:
    return raw.strip()


def tokens(raw: str) -> str:
    parse_tokens(raw)
    return raw.strip()


def http_url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc:
        raise ValueError("expected an http:// or https:// URL")
    return value


def whole(lo: int, hi: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            raise ValueError("expected a whole number") from None
        if value < lo or (hi is not None and value > hi):
            raise ValueError(f"expected a whole number from {lo} to {hi if hi else 'any'}")
        return value

    return parse


def seconds(lo: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError("expected a number of seconds, e.g. 2.5") from None
        if not math.isfinite(value) or value < lo:
            raise ValueError(f"expected a number of seconds of at least {lo}")
        return value

    return parse


def flag(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def queue_names(raw: str) -> tuple[str, ...]:
    names = tuple(q.strip() for q in raw.split(",") if q.strip())
    bad = [q for q in names if not _NAME_RE.match(q)]
    if not names or bad:
        raise ValueError("expected comma-separated queue names of letters, digits, '_', '-', '.'")
    return names


def module_names(raw: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in raw.split(",") if m.strip())
    bad = [m for m in names if not all(part.isidentifier() for part in m.split("."))]
    if bad:
        raise ValueError(f"expected comma-separated Python module names, got {', '.join(bad)}")
    return names


def choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return value

    return parse


def log_level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value


def redis_url(raw: str) -> str:
    value = raw.strip()
    if not is_redis_url(value):
        raise ValueError(
            "expected a Redis URL (redis://, rediss://, sentinel://, redis-sentinel://)"
        )
    from beatflow.connections import parse

    parse(value)  # a Sentinel URL without master_name, a bad port or ssl_cert_reqs...
    return value


def broker_url(raw: str) -> str:
    """A Redis URL (as :func:`redis_url`) or a RabbitMQ one: amqp://, amqps://, pyamqp://."""
    value = raw.strip()
    from beatflow.connections import check_amqp, is_amqp

    if not is_amqp(value):
        try:
            return redis_url(value)
        except ValueError as exc:
            if is_redis_url(value):
                raise
            raise ValueError(
                "expected a Redis URL (redis://, rediss://, sentinel://, redis-sentinel://) "
                "or a RabbitMQ URL (amqp://, amqps://, pyamqp://)"
            ) from exc
    check_amqp(value)
    return value


def database_url(raw: str) -> str:
    value = raw.strip()
    scheme = urlsplit(value).scheme.split("+")[0]
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ValueError(
            "expected postgresql+psycopg://user:password@host:5432/db or sqlite:///path.db"
        )
    return psycopg_url(value)
