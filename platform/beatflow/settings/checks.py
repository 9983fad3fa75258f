"""Cross-field checks of Settings: each problem names the variables and what to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from beatflow.settings.source import PREFIX
from beatflow.settings.values import is_redis_url, mask_url

_REDIS_SCHEMES = "redis://, rediss://, sentinel://, redis-sentinel://"

if TYPE_CHECKING:
    from beatflow.settings.model import Settings


def problems(s: Settings) -> list[str]:
    """What is wrong with ``s`` as a whole (``[]``: nothing)."""
    out = _url_problems(s)
    if "://" not in s.database_url:
        out.append(
            f"{PREFIX}DATABASE_URL={mask_url(s.database_url)!r}: expected a SQLAlchemy "
            "URL such as postgresql+psycopg://user:pw@host/db or sqlite:///path.db"
        )
    if not s.queues:
        out.append(f"{PREFIX}QUEUES: at least one queue name is required")
    if s.task_soft_time_limit >= s.task_time_limit:
        out.append(
            f"{PREFIX}TASK_SOFT_TIME_LIMIT={s.task_soft_time_limit} must be below "
            f"{PREFIX}TASK_TIME_LIMIT={s.task_time_limit}"
        )
    # RabbitMQ gives a message back when its consumer's connection closes, not after a timeout
    if not s.broker_is_amqp and s.visibility_timeout <= s.task_time_limit:
        out.append(
            f"{PREFIX}VISIBILITY_TIMEOUT={s.visibility_timeout} must exceed "
            f"{PREFIX}TASK_TIME_LIMIT={s.task_time_limit}, or Redis redelivers tasks "
            "that are still running"
        )
    if s.beat_renew_interval * 2 > s.beat_lock_timeout:
        out.append(
            f"{PREFIX}BEAT_RENEW_INTERVAL={s.beat_renew_interval} must be at most half of "
            f"{PREFIX}BEAT_LOCK_TIMEOUT={s.beat_lock_timeout}, or the beat lock lapses "
            "between renewals and two beats fire"
        )
    if s.beat_loop_interval >= s.beat_lock_timeout:
        out.append(
            f"{PREFIX}BEAT_LOOP_INTERVAL={s.beat_loop_interval} must be below "
            f"{PREFIX}BEAT_LOCK_TIMEOUT={s.beat_lock_timeout}"
        )
    if s.beat_stall_timeout <= max(s.beat_lock_timeout, 2 * s.beat_db_timeout):
        out.append(
            f"{PREFIX}BEAT_STALL_TIMEOUT={s.beat_stall_timeout} must exceed "
            f"{PREFIX}BEAT_LOCK_TIMEOUT={s.beat_lock_timeout} and twice "
            f"{PREFIX}BEAT_DB_TIMEOUT={s.beat_db_timeout}, or a healthy but slow beat "
            "steps down"
        )
    if s.reconcile_stall_seconds <= s.lease_seconds:
        out.append(
            f"{PREFIX}RECONCILE_STALL_SECONDS={s.reconcile_stall_seconds} must exceed "
            f"{PREFIX}LEASE_SECONDS={s.lease_seconds}, or running tasks look stalled"
        )
    out += _web_access_problems(s)
    if s.log_format not in ("auto", "json", "text"):
        out.append(f"{PREFIX}LOG_FORMAT={s.log_format!r}: expected auto, json or text")
    return out


def _url_problems(s: Settings) -> list[str]:
    """The broker (Redis or RabbitMQ) and the Redis URLs; RabbitMQ needs BEATFLOW_REDIS_URL."""
    out: list[str] = []
    for name in ("redis_url", "result_backend_url", "redbeat_url"):
        url = getattr(s, name)
        if url and not is_redis_url(url):
            out.append(
                f"{PREFIX}{name.upper()}={mask_url(url)!r}: expected a Redis URL ({_REDIS_SCHEMES})"
            )
    if s.broker_is_amqp:
        if not s.redis_url:
            out.append(
                f"{PREFIX}BROKER_URL={mask_url(s.broker_url)!r} is RabbitMQ: set "
                f"{PREFIX}REDIS_URL to the Redis beatflow keeps the beat's lock and schedules, "
                "results and leases in (e.g. redis://127.0.0.1:6379/0)"
            )
    elif not is_redis_url(s.broker_url):
        out.append(
            f"{PREFIX}BROKER_URL={mask_url(s.broker_url)!r}: expected a Redis URL "
            f"({_REDIS_SCHEMES}) or a RabbitMQ URL (amqp://, amqps://, pyamqp://)"
        )
    return out


def _web_access_problems(s: Settings) -> list[str]:
    from beatflow.settings.accounts import parse_users

    out: list[str] = []
    if s.web_oidc_issuer and not s.web_oidc_client_id:
        out.append(
            f"{PREFIX}WEB_OIDC_ISSUER is set without {PREFIX}WEB_OIDC_CLIENT_ID: register "
            "beatflow as a client at the provider and set its id (and secret)"
        )
    if s.web_password and s.web_users:
        try:
            names = {u.name for u in parse_users(s.web_users)}
        except ValueError:
            names = set()  # said by the field's own check
        if s.web_user in names:
            out.append(
                f"{PREFIX}WEB_USER={s.web_user!r} is also a user of {PREFIX}WEB_USERS: "
                f"keep one (or rename the {PREFIX}WEB_PASSWORD user)"
            )
    return out
