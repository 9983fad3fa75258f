"""One Redis URL, every client: the beat, the exporter, ``health``, ``beat status`` and the
Celery/kombu/RedBeat configuration all read a Redis URL through this module, so Sentinel and TLS
work the same everywhere. Imports nothing of beatflow (settings uses it).

Accepted URLs::

    redis://[[user]:password@]host:6379/0
    rediss://[[user]:password@]host:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem
        (also ssl_certfile, ssl_keyfile; ssl_cert_reqs is required|optional|none, default
        required)
    sentinel://[:password@]host1:26379,host2:26379/0?master_name=mymaster&sentinel_password=s
        (kombu's sentinel://h1:26379;sentinel://h2:26379/0 list is accepted too; the userinfo
        password is the master's, sentinel_password the Sentinels' own; master_name defaults
        to mymaster)
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

DEFAULT_MASTER = "mymaster"  # Sentinel's own example name, when the URL names none
SENTINEL_SCHEMES = frozenset({"sentinel", "redis-sentinel"})
SCHEMES = frozenset({"redis", "rediss", "unix", *SENTINEL_SCHEMES})  # what parse() accepts
# RabbitMQ (AMQP 0-9-1 through py-amqp): accepted as the broker only; beatflow's own state
# (RedBeat's lock and schedules, results, leases) stays in Redis
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})
_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "cert_required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "cert_optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
    "cert_none": ssl.CERT_NONE,
}
_SSL_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    """A parsed Redis URL: one server, or the Sentinels that know the master."""

    url: str
    hosts: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel: bool = False
    master_name: str = ""
    sentinel_password: str | None = None
    tls: dict[str, Any] = field(default_factory=dict)  # ssl_* options; empty: no TLS

    @property
    def ssl_options(self) -> dict[str, Any] | None:
        return dict(self.tls) if self.tls else None


def parse(url: str) -> RedisEndpoint:
    """Parse a Redis URL; ValueError says what is wrong (never echoing a password)."""
    parts = [p for p in url.strip().split(";") if p]
    if not parts:
        raise ValueError("empty Redis URL")
    first = urlsplit(parts[0])
    scheme = first.scheme
    if scheme not in SCHEMES:
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r}: use redis://, rediss:// or sentinel://"
        )
    last = urlsplit(parts[-1])
    query = dict(parse_qsl(last.query or first.query))
    db = _db(last.path or first.path)
    hosts: list[tuple[str, int]] = []
    for part in parts:
        split = urlsplit(part)
        netloc = split.netloc.rpartition("@")[2]
        for hostport in filter(None, netloc.split(",")):
            host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
            default = 26379 if scheme in SENTINEL_SCHEMES else 6379
            try:
                hosts.append((host or "127.0.0.1", int(port) if port else default))
            except ValueError:
                raise ValueError(f"bad port {port!r} in Redis URL") from None
    username = unquote(first.username) if first.username else None
    password = unquote(first.password) if first.password else None
    tls = _tls(query) if scheme == "rediss" or query.get("ssl") == "true" else {}
    if scheme in SENTINEL_SCHEMES:
        master = query.get("master_name") or query.get("service_name") or DEFAULT_MASTER
        return RedisEndpoint(
            url,
            tuple(hosts),
            db,
            username,
            password,
            sentinel=True,
            master_name=master,
            sentinel_password=query.get("sentinel_password") or None,
            tls=tls,
        )
    return RedisEndpoint(url, tuple(hosts), db, username, password, tls=tls)


def redis_client(
    url: str, *, timeout: float | None = None, decode_responses: bool = True
) -> redis.Redis:
    """A client for ``url``; through Sentinel it follows the master across failovers. Calls and
    connects time out after ``timeout`` seconds (None: never)."""
    ep = parse(url)
    common: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "socket_keepalive": True,
        "decode_responses": decode_responses,
    }
    if ep.sentinel:
        tls = {"ssl": True, **ep.tls} if ep.tls else {}
        sentinel = Sentinel(
            list(ep.hosts),
            sentinel_kwargs={
                "password": ep.sentinel_password,
                "socket_timeout": timeout,
                "socket_connect_timeout": timeout,
            },
            **common,
            **tls,
        )
        master: redis.Redis = sentinel.master_for(
            ep.master_name,
            db=ep.db,
            username=ep.username,
            password=ep.password,
            **common,
            **tls,
        )
        return master
    if urlsplit(url).scheme == "unix":
        return redis.Redis.from_url(url, **common)
    host, port = ep.hosts[0]
    return redis.Redis(
        host=host,
        port=port,
        db=ep.db,
        username=ep.username,
        password=ep.password,
        ssl=bool(ep.tls),
        **ep.tls,
        **common,
    )


def is_amqp(url: str) -> bool:
    """Whether ``url`` names a RabbitMQ broker (``amqp://``, ``amqps://``, ``pyamqp://``)."""
    return urlsplit(url.strip()).scheme in AMQP_SCHEMES


def check_amqp(url: str) -> None:
    """ValueError unless ``url`` is an AMQP URL kombu can use (a host, a numeric port)."""
    split = urlsplit(url.strip())
    if split.scheme not in AMQP_SCHEMES:
        raise ValueError(f"unsupported AMQP URL scheme {split.scheme!r}")
    try:
        split.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError("bad port in the AMQP URL") from None
    if not split.hostname:
        raise ValueError("the AMQP URL names no host: amqp://user:password@host:5672/vhost")


def kombu_url(url: str) -> str:
    """The URL Celery/kombu should get: Sentinel as kombu's ``sentinel://h1/db;sentinel://h2/db``
    list (the master name goes in the transport options), ``rediss://`` with ssl_cert_reqs; an
    AMQP URL as it is (``amqps://`` is kombu's TLS transport)."""
    if is_amqp(url):
        return url
    ep = parse(url)
    if ep.sentinel:
        auth = ""
        if ep.password is not None:
            auth = f"{quote(ep.username or '', safe='')}:{quote(ep.password, safe='')}@"
        # the database on every Sentinel: kombu and Celery's Sentinel backend read the first's
        return ";".join(f"sentinel://{auth}{h}:{p}/{ep.db}" for h, p in ep.hosts)
    if ep.tls:
        split = urlsplit(url)
        query = dict(parse_qsl(split.query))
        query.setdefault("ssl_cert_reqs", "required")
        qs = "&".join(f"{k}={quote(v, safe='/')}" for k, v in query.items())
        return split._replace(query=qs).geturl()
    return url


def transport_options(url: str) -> dict[str, Any]:
    """kombu transport options (broker and result backend) that the URL implies."""
    if is_amqp(url):
        return {}
    ep = parse(url)
    if not ep.sentinel:
        return {}
    options: dict[str, Any] = {"master_name": ep.master_name}
    if ep.sentinel_password:
        options["sentinel_kwargs"] = {"password": ep.sentinel_password}
    return options


def ssl_options(url: str) -> dict[str, Any] | None:
    """``broker_use_ssl`` / ``redis_backend_use_ssl`` for a Redis TLS URL, else None (an
    ``amqps://`` URL's TLS is kombu's: its transport connects with TLS by default)."""
    if is_amqp(url):
        return None
    return parse(url).ssl_options


def redbeat_config(url: str, *, timeout: float | None = None) -> dict[str, Any]:
    """RedBeat's own settings for ``url`` (``redbeat_redis_url``, its options and TLS), so a
    RedBeat reader (its tooling, RedBeatSchedulerEntry) reaches the same Redis."""
    ep = parse(url)
    if ep.sentinel:
        options: dict[str, Any] = {
            "sentinels": [list(h) for h in ep.hosts],
            "service_name": ep.master_name,
            "password": ep.password,
            "db": ep.db,
            "socket_timeout": timeout,
        }
        if ep.username:
            options["username"] = ep.username
        if ep.sentinel_password:
            options["sentinel_kwargs"] = {"password": ep.sentinel_password}
        config: dict[str, Any] = {
            "redbeat_redis_url": f"redis-sentinel://{ep.hosts[0][0]}:{ep.hosts[0][1]}/{ep.db}",
            "redbeat_redis_options": options,
        }
    else:
        # RedBeat hands these to its client: a call on a dead connection fails, never hangs
        timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        config = {
            "redbeat_redis_url": url,
            "redbeat_redis_options": {k: v for k, v in timeouts.items() if v is not None},
        }
    if ep.tls:
        config["redbeat_redis_use_ssl"] = dict(ep.tls)
    return config


def _db(path: str) -> int:
    raw = path.strip("/") or "0"
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"bad Redis database number {raw!r} in the URL path") from None


def _tls(query: dict[str, str]) -> dict[str, Any]:
    reqs = query.get("ssl_cert_reqs", "required").lower()
    if reqs not in _CERT_REQS:
        raise ValueError(f"ssl_cert_reqs={reqs!r}: expected required, optional or none")
    tls: dict[str, Any] = {"ssl_cert_reqs": _CERT_REQS[reqs]}
    for name in _SSL_FILES:
        if query.get(name):
            tls[name] = query[name]
    return tls
