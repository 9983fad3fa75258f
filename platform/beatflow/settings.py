"""One frozen Settings object, built from ``BEATFLOW_*`` variables, and the Celery and RedBeat
configuration derived from it. The only module that reads the environment; imports nothing of ours
but errors."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from beatflow import celery_passthrough, keys
from beatflow.errors import SettingsError

PREFIX = "BEATFLOW_"
_MASK = "****"
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def mask_url(url: str) -> str:
    """Return ``url`` with every password replaced by ``****``: the userinfo of each host
    (also in kombu's ``sentinel://...;sentinel://...`` list) and ``password=`` query values."""
    masked = _USERINFO_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{_MASK}@", url)
    return _QUERY_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{_MASK}", masked)


_USERINFO_PASSWORD_RE = re.compile(r"(://[^:@/;,?#]*:)[^;/?#]*@")
_QUERY_PASSWORD_RE = re.compile(r"([?&][a-z_]*password=)[^&;#]*", re.IGNORECASE)


def _secret(name: str) -> bool:
    return any(word in name for word in ("password", "secret", "token"))


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a beatflow process needs to know, validated once at start-up."""

    broker_url: str = "redis://127.0.0.1:6379/0"
    result_backend_url: str = ""  # empty: same as broker_url
    redbeat_url: str = ""  # empty: same as broker_url
    database_url: str = "sqlite:///.beatflow/beatflow.db"
    dags_folder: str = "dags"
    imports: tuple[str, ...] = ()  # plain Celery task modules (BEATFLOW_IMPORTS), see plain.py
    queues: tuple[str, ...] = ("default",)
    visibility_timeout: int = 3600
    unacked_restore_interval: int = 10  # seconds between sweeps that give back lost messages
    task_soft_time_limit: int = 300
    task_time_limit: int = 360
    result_expires: int = 86_400
    result_max_bytes: int = 1 << 20
    lease_seconds: float = 30.0
    # how long a task run's outcome write is retried in process while the results DB is down
    result_write_retry_seconds: float = 60.0
    worker_disable_prefetch: bool = False
    # the reconciler (a pass every interval by whichever worker holds its Redis lease)
    reconcile_enabled: bool = True
    reconcile_interval: float = 10.0
    reconcile_stall_seconds: float = 60.0  # a running run silent this long is resumed
    reconcile_max_resumes: int = 5  # then the run is failed (each resume waits twice as long)
    reconcile_batch: int = 100  # runs looked at per pass and kind (bounded work)
    beat_lock_timeout: float = 2.0
    beat_renew_interval: float = 0.5
    beat_loop_interval: float = 0.5
    # a leader whose loop has not completed a pass for this long steps down (and is unhealthy)
    beat_stall_timeout: float = 30.0
    beat_db_timeout: float = 10.0  # the beat's statement and connect timeout on the results DB
    schedule_sync_interval: float = 10.0
    catchup_window: int = 86_400
    test_clock_file: str = ""  # tests only: a file holding seconds the beat's clock is shifted by
    flower_user: str = "admin"
    flower_password: str = ""
    flower_port: int = 5555
    flower_max_tasks: int = 10_000  # tasks Flower keeps in memory (its --max_tasks)
    flower_max_workers: int = 500  # workers Flower keeps in memory (its --max_workers)
    flower_purge_offline_workers: int = 600  # seconds; Flower forgets offline workers; 0: never
    metrics_port: int = 9808
    web_port: int = 8080
    web_user: str = "admin"
    web_password: str = ""  # required by `beatflow web`
    web_tokens: str = ""  # comma-separated name:token pairs (bearer tokens for machines)
    web_secret_key: str = ""  # session signing key; empty: random per process
    web_session_idle_seconds: int = 3600  # a session unused this long ends
    web_session_max_seconds: int = 43_200  # a session ends this long after its login anyway
    web_flower_url: str = ""  # Flower's address for task links; empty: this host, flower_port
    task_log_max_bytes: int = 65_536  # per task run try; 0 turns log capture off
    api_url: str = ""  # `beatflow dags trigger` goes through this web API when set
    api_token: str = ""
    log_format: str = "auto"
    log_level: str = "INFO"
    instance: str = ""  # a name for this process in metrics/logs; empty: hostname
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # Celery settings passed through (BEATFLOW_CELERY_<SETTING>, see celery_passthrough.py)
    celery_overrides: Mapping[str, Any] = field(default_factory=dict, compare=False)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``BEATFLOW_*`` variables; report every bad value at once."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "celery_overrides"}
        for name in sorted(known):
            var = PREFIX + name.upper()
            raw = env.get(var)
            if name in FILE_SETTINGS and env.get(var + "_FILE"):
                if raw:
                    problems.append(f"{var} and {var}_FILE are both set: keep one")
                    continue
                try:
                    raw = _read_secret_file(env[var + "_FILE"])
                except ValueError as exc:
                    problems.append(f"{var}_FILE={env[var + '_FILE']!r}: {exc}")
                    continue
            if raw is None or raw == "":
                continue
            parser = _PARSERS.get(name, _str)
            try:
                values[name] = parser(raw)
            except ValueError as exc:
                shown = _MASK if _secret(name) else mask_url(raw)
                problems.append(f"{var}={shown!r}: {exc}")
        unknown = sorted(
            k
            for k in env
            if k.startswith(PREFIX)
            and k[len(PREFIX) :].lower() not in known
            and not (k.endswith("_FILE") and k[len(PREFIX) : -5].lower() in FILE_SETTINGS)
            and not k.startswith(PREFIX + "TEST_")
            and not k.startswith(celery_passthrough.CELERY_PREFIX)
        )
        values["celery_overrides"], celery_problems = celery_passthrough.parse(env)
        problems.extend(celery_problems)
        if problems:
            raise SettingsError(problems)
        settings = cls(**values)
        problems = settings.problems()
        if problems:
            raise SettingsError(problems)
        if unknown:
            object.__setattr__(settings, "extra", {k: env[k] for k in unknown})
            _warn_unknown(unknown, known)
        return settings

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied, validated."""
        new = dataclasses.replace(self, **changes)
        problems = new.problems()
        if problems:
            raise SettingsError(problems)
        return new

    def problems(self) -> list[str]:
        """Cross-field checks: each returned line names the variables and what to change."""
        out: list[str] = []
        for name in ("broker_url", "result_backend_url", "redbeat_url"):
            url = getattr(self, name)
            if url and not _is_redis_url(url):
                out.append(
                    f"{PREFIX}{name.upper()}={mask_url(url)!r}: expected a Redis URL "
                    f"(redis://, rediss://, sentinel://, redis-sentinel://)"
                )
        if "://" not in self.database_url:
            out.append(
                f"{PREFIX}DATABASE_URL={mask_url(self.database_url)!r}: expected a SQLAlchemy "
                "URL such as postgresql+psycopg://user:pw@host/db or sqlite:///path.db"
            )
        if not self.queues:
            out.append(f"{PREFIX}QUEUES: at least one queue name is required")
        if self.task_soft_time_limit >= self.task_time_limit:
            out.append(
                f"{PREFIX}TASK_SOFT_TIME_LIMIT={self.task_soft_time_limit} must be below "
                f"{PREFIX}TASK_TIME_LIMIT={self.task_time_limit}"
            )
        if self.visibility_timeout <= self.task_time_limit:
            out.append(
                f"{PREFIX}VISIBILITY_TIMEOUT={self.visibility_timeout} must exceed "
                f"{PREFIX}TASK_TIME_LIMIT={self.task_time_limit}, or Redis redelivers tasks "
                "that are still running"
            )
        if self.beat_renew_interval * 2 > self.beat_lock_timeout:
            out.append(
                f"{PREFIX}BEAT_RENEW_INTERVAL={self.beat_renew_interval} must be at most half of "
                f"{PREFIX}BEAT_LOCK_TIMEOUT={self.beat_lock_timeout}, or the beat lock lapses "
                "between renewals and two beats fire"
            )
        if self.beat_loop_interval >= self.beat_lock_timeout:
            out.append(
                f"{PREFIX}BEAT_LOOP_INTERVAL={self.beat_loop_interval} must be below "
                f"{PREFIX}BEAT_LOCK_TIMEOUT={self.beat_lock_timeout}"
            )
        if self.beat_stall_timeout <= max(self.beat_lock_timeout, 2 * self.beat_db_timeout):
            out.append(
                f"{PREFIX}BEAT_STALL_TIMEOUT={self.beat_stall_timeout} must exceed "
                f"{PREFIX}BEAT_LOCK_TIMEOUT={self.beat_lock_timeout} and twice "
                f"{PREFIX}BEAT_DB_TIMEOUT={self.beat_db_timeout}, or a healthy but slow beat "
                "steps down"
            )
        if self.reconcile_stall_seconds <= self.lease_seconds:
            out.append(
                f"{PREFIX}RECONCILE_STALL_SECONDS={self.reconcile_stall_seconds} must exceed "
                f"{PREFIX}LEASE_SECONDS={self.lease_seconds}, or running tasks look stalled"
            )
        if self.log_format not in ("auto", "json", "text"):
            out.append(f"{PREFIX}LOG_FORMAT={self.log_format!r}: expected auto, json or text")
        return out

    # ---------------------------------------------------------------- derived values

    @property
    def default_queue(self) -> str:
        return self.queues[0]

    @property
    def effective_result_backend_url(self) -> str:
        return self.result_backend_url or self.broker_url

    @property
    def effective_redbeat_url(self) -> str:
        return self.redbeat_url or self.broker_url

    @property
    def dags_path(self) -> Path:
        return Path(self.dags_folder)

    def masked(self) -> dict[str, Any]:
        """Every setting by variable name, secrets masked: what ``beatflow config show`` prints."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("extra", "celery_overrides"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, str):
                value = _MASK if (_secret(f.name) and value) else mask_url(value)
            out[PREFIX + f.name.upper()] = value
        for name, value in sorted(self.celery_overrides.items()):
            shown = mask_url(value) if isinstance(value, str) else value
            out[celery_passthrough.CELERY_PREFIX + name.upper()] = shown
        return out

    def __repr__(self) -> str:
        body = ", ".join(f"{k[len(PREFIX) :].lower()}={v!r}" for k, v in self.masked().items())
        return f"Settings({body})"

    def celery_config(self) -> dict[str, Any]:
        """The Celery (and RedBeat) configuration: users never set these names themselves.
        Redis URLs go through :mod:`beatflow.connections` (Sentinel master name, TLS options)."""
        from beatflow import connections

        transport = {
            "visibility_timeout": self.visibility_timeout,
            # kombu sweeps for unacked messages of dead workers every interval x throttle
            # seconds (100 s by default); sweep every interval instead.
            "unacked_restore_interval": self.unacked_restore_interval,
            "unacked_restore_throttle": 1,
            "socket_keepalive": True,
            "retry_on_timeout": True,
        }
        config = {
            "broker_url": connections.kombu_url(self.broker_url),
            "result_backend": connections.kombu_url(self.effective_result_backend_url),
            "broker_use_ssl": connections.ssl_options(self.broker_url),
            # kombu's Redis (or Sentinel) transport, repaired so a worker survives its Redis
            # restarting or refusing writes for a while
            "broker_transport": _BROKER_TRANSPORTS.get(urlsplit(self.broker_url).scheme),
            "redis_backend_use_ssl": connections.ssl_options(self.effective_result_backend_url),
            "broker_transport_options": {
                **transport,
                **connections.transport_options(self.broker_url),
            },
            # A sender whose Redis is down fails in ~2 s, not after the backend's 20 default
            # retries: `dags trigger` says so at once and the reconciler sends the run later.
            "result_backend_transport_options": {
                **transport,
                **connections.transport_options(self.effective_result_backend_url),
                "retry_policy": PUBLISH_RETRY,
            },
            "task_publish_retry_policy": PUBLISH_RETRY,
            "broker_connection_retry_on_startup": True,
            # JSON only: a pickled (or any other) message is refused before it is decoded.
            "task_serializer": "json",
            "result_serializer": "json",
            "accept_content": ["json"],
            "result_accept_content": ["json"],
            "event_serializer": "json",
            "task_acks_late": True,
            "task_reject_on_worker_lost": True,
            "task_acks_on_failure_or_timeout": True,
            "worker_prefetch_multiplier": 1,
            "worker_disable_prefetch": self.worker_disable_prefetch,
            "task_default_queue": self.default_queue,
            "task_create_missing_queues": True,
            "task_soft_time_limit": self.task_soft_time_limit,
            "task_time_limit": self.task_time_limit,
            "task_track_started": True,
            "task_send_sent_event": True,
            "worker_send_task_events": True,
            "result_expires": self.result_expires,
            "result_extended": False,
            "result_chord_join_timeout": 30.0,
            "timezone": "UTC",
            "enable_utc": True,
            "worker_hijack_root_logger": False,
            "worker_cancel_long_running_tasks_on_connection_loss": False,
            "beat_scheduler": "beatflow.scheduler.beat:BeatflowScheduler",
            "beat_max_loop_interval": self.beat_loop_interval,
            **connections.redbeat_config(
                self.effective_redbeat_url, timeout=max(0.2, self.beat_lock_timeout / 3)
            ),
            "redbeat_key_prefix": keys.REDBEAT_PREFIX,
            "redbeat_lock_key": keys.LOCK,
            "redbeat_lock_timeout": self.beat_lock_timeout,
        }
        return celery_passthrough.apply(config, self.celery_overrides)


PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
# beatflow's broker transport by broker URL scheme; unix:// keeps kombu's own
_BROKER_TRANSPORTS = {
    "redis": "beatflow.broker_transport:Transport",
    "rediss": "beatflow.broker_transport:Transport",
    "sentinel": "beatflow.broker_transport:SentinelTransport",
    "redis-sentinel": "beatflow.broker_transport:SentinelTransport",
}
# secrets that may also come from a file named by <VAR>_FILE (Docker/Kubernetes secrets); the
# URLs are here because they carry the Redis and PostgreSQL passwords
FILE_SETTINGS = frozenset(
    {
        "web_password",
        "web_tokens",
        "web_secret_key",
        "api_token",
        "flower_password",
        "broker_url",
        "result_backend_url",
        "redbeat_url",
        "database_url",
    }
)


_warned: set[str] = set()


def _warn_unknown(unknown: list[str], known: set[str]) -> None:
    """A misspelt variable is ignored, but said so (once per process), with a did-you-mean."""
    import difflib
    import logging

    names = sorted(PREFIX + n.upper() for n in known)
    for var in unknown:
        if var in _warned:
            continue
        _warned.add(var)
        close = difflib.get_close_matches(var, names, n=1, cutoff=0.75)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        logging.getLogger(__name__).warning(
            "%s is not a beatflow setting and is ignored%s", var, hint
        )


def _read_secret_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the secret file: {exc.__class__.__name__}") from None


def parse_tokens(raw: str) -> dict[str, str]:
    """``name:token,name:token`` -> {name: token}; ValueError says what is wrong."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in raw.split(",") if i.strip()):
        name, sep, token = item.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not _QUEUE_RE.match(name) or len(token) < 16:
            raise ValueError(
                "expected comma-separated name:token pairs, names of letters, digits, '_', '-', "
                "'.', tokens of at least 16 characters"
            )
        if name in out:
            raise ValueError(f"token name {name!r} appears twice")
        out[name] = token
    return out


def _tokens(raw: str) -> str:
    parse_tokens(raw)
    return raw.strip()


def _http_url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc:
        raise ValueError("expected an http:// or https:// URL")
    return value


def _is_redis_url(url: str) -> bool:
    """Whether ``url``'s scheme is one beatflow.connections reads (the one list of them)."""
    from beatflow.connections import SCHEMES  # lazy, as in celery_config

    return urlsplit(url).scheme in SCHEMES


def _str(raw: str) -> str:
    return raw.strip()


def _int(lo: int, hi: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            raise ValueError("expected a whole number") from None
        if value < lo or (hi is not None and value > hi):
            raise ValueError(f"expected a whole number from {lo} to {hi if hi else 'any'}")
        return value

    return parse


def _float(lo: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError("expected a number of seconds, e.g. 2.5") from None
        if not math.isfinite(value) or value < lo:
            raise ValueError(f"expected a number of seconds of at least {lo}")
        return value

    return parse


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _queues(raw: str) -> tuple[str, ...]:
    names = tuple(q.strip() for q in raw.split(",") if q.strip())
    bad = [q for q in names if not _QUEUE_RE.match(q)]
    if not names or bad:
        raise ValueError("expected comma-separated queue names of letters, digits, '_', '-', '.'")
    return names


def _modules(raw: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in raw.split(",") if m.strip())
    bad = [m for m in names if not all(part.isidentifier() for part in m.split("."))]
    if bad:
        raise ValueError(f"expected comma-separated Python module names, got {', '.join(bad)}")
    return names


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return value

    return parse


def _level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value


def _redis_url(raw: str) -> str:
    value = raw.strip()
    if not _is_redis_url(value):
        raise ValueError(
            "expected a Redis URL (redis://, rediss://, sentinel://, redis-sentinel://)"
        )
    from beatflow.connections import parse

    parse(value)  # a Sentinel URL without master_name, a bad port or ssl_cert_reqs...
    return value


def _db_url(raw: str) -> str:
    value = raw.strip()
    scheme = urlsplit(value).scheme.split("+")[0]
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ValueError(
            "expected postgresql+psycopg://user:password@host:5432/db or sqlite:///path.db"
        )
    return psycopg_url(value)


def psycopg_url(url: str) -> str:
    """A PostgreSQL URL as SQLAlchemy's psycopg 3 dialect takes it: ``postgres://`` (what
    Heroku-style providers hand out) and ``postgresql://`` become ``postgresql+psycopg://``;
    an explicit driver is kept; any other URL is returned unchanged."""
    scheme, sep, rest = url.partition("://")
    base, _, driver = scheme.partition("+")
    if not sep or base not in ("postgres", "postgresql"):
        return url
    return f"postgresql+{driver or 'psycopg'}://{rest}"


_PARSERS: dict[str, Callable[[str], Any]] = {
    "broker_url": _redis_url,
    "result_backend_url": _redis_url,
    "redbeat_url": _redis_url,
    "database_url": _db_url,
    "queues": _queues,
    "visibility_timeout": _int(1),
    "unacked_restore_interval": _int(1, 3600),
    "task_soft_time_limit": _int(1),
    "task_time_limit": _int(1),
    "result_expires": _int(60),
    "result_max_bytes": _int(1),
    "lease_seconds": _float(1.0),
    "result_write_retry_seconds": _float(0.0),
    "worker_disable_prefetch": _bool,
    "reconcile_enabled": _bool,
    "reconcile_interval": _float(0.5),
    "reconcile_stall_seconds": _float(5.0),
    "reconcile_max_resumes": _int(0, 100),
    "reconcile_batch": _int(1, 10_000),
    "beat_lock_timeout": _float(0.5),
    "beat_renew_interval": _float(0.05),
    "beat_loop_interval": _float(0.05),
    "beat_stall_timeout": _float(1.0),
    "beat_db_timeout": _float(0.5),
    "schedule_sync_interval": _float(0.5),
    "catchup_window": _int(0),
    "flower_port": _int(1, 65535),
    "imports": _modules,
    "flower_max_tasks": _int(100),
    "flower_max_workers": _int(1),
    "flower_purge_offline_workers": _int(0),
    "metrics_port": _int(1, 65535),
    "web_port": _int(1, 65535),
    "web_tokens": _tokens,
    "web_session_idle_seconds": _int(60),
    "web_session_max_seconds": _int(60),
    "web_flower_url": _http_url,
    "task_log_max_bytes": _int(0, 16 << 20),
    "api_url": _http_url,
    "log_format": _choice("auto", "json", "text"),
    "log_level": _level,
}
