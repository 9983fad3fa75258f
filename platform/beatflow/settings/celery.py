"""The Celery (and RedBeat) configuration derived from Settings: users never set these names
themselves (but for the ``BEATFLOW_CELERY_*`` pass-through, applied last)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from beatflow import celery_passthrough, keys

if TYPE_CHECKING:
    from beatflow.settings.model import Settings

PUBLISH_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
# beatflow's broker transport by broker URL scheme; unix:// keeps kombu's own
BROKER_TRANSPORTS = {
    "redis": "beatflow.broker_transport:Transport",
    "rediss": "beatflow.broker_transport:Transport",
    "sentinel": "beatflow.broker_transport:SentinelTransport",
    "redis-sentinel": "beatflow.broker_transport:SentinelTransport",
}


def broker_config(settings: Settings, redis_transport: dict[str, Any]) -> dict[str, Any]:
    """The broker's part of the configuration: kombu's Redis transport repaired (Redis), or
    py-amqp with publisher confirms (RabbitMQ)."""
    from beatflow import connections

    s = settings
    url = s.broker_url
    if s.broker_is_amqp:
        return {
            "broker_url": connections.kombu_url(url),
            "broker_use_ssl": None,  # amqps:// connects with TLS (kombu's SSL transport)
            # a send returns once RabbitMQ has taken the message (publisher confirms)
            "broker_transport_options": {"confirm_publish": True},
            **rabbitmq_queues(s),
        }
    return {
        "broker_url": connections.kombu_url(url),
        "broker_use_ssl": connections.ssl_options(url),
        # kombu's Redis (or Sentinel) transport, repaired so a worker survives its Redis
        # restarting or refusing writes for a while
        "broker_transport": BROKER_TRANSPORTS.get(urlsplit(url).scheme),
        "broker_transport_options": {**redis_transport, **connections.transport_options(url)},
    }


def rabbitmq_queues(settings: Settings) -> dict[str, Any]:
    """How Celery declares beatflow's queues on RabbitMQ: durable (Celery's default, as its
    messages are persistent), classic with ``x-max-priority``, or quorum queues, which have no
    priorities on RabbitMQ 3.x and no global QoS (Celery's worker detects them and prefetches
    per consumer), their countdowns and ETAs through Celery's native delayed delivery (which
    needs topic exchanges)."""
    if settings.rabbitmq_quorum_queues:
        return {
            "task_default_queue_type": "quorum",
            "task_create_missing_queue_type": "quorum",
            "task_default_exchange_type": "topic",
            "task_create_missing_queue_exchange_type": "topic",
            "worker_detect_quorum_queues": True,
            "task_queue_max_priority": None,
        }
    return {
        "task_default_queue_type": "classic",
        "task_queue_max_priority": settings.rabbitmq_max_priority or None,
    }


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery (and RedBeat) configuration for ``settings``. Redis URLs go through
    :mod:`beatflow.connections` (Sentinel master name, TLS options)."""
    from beatflow import connections

    s = settings
    result_url = s.effective_result_backend_url
    transport = {
        "visibility_timeout": s.visibility_timeout,
        # kombu sweeps for unacked messages of dead workers every interval x throttle
        # seconds (100 s by default); sweep every interval instead.
        "unacked_restore_interval": s.unacked_restore_interval,
        "unacked_restore_throttle": 1,
        "socket_keepalive": True,
        "retry_on_timeout": True,
    }
    config = {
        **broker_config(s, transport),
        "result_backend": connections.kombu_url(result_url),
        "redis_backend_use_ssl": connections.ssl_options(result_url),
        # A sender whose Redis is down fails in ~2 s, not after the backend's 20 default
        # retries: `dags trigger` says so at once and the reconciler sends the run later.
        "result_backend_transport_options": {
            **transport,
            **connections.transport_options(result_url),
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
        "worker_disable_prefetch": s.worker_disable_prefetch,
        "task_default_queue": s.default_queue,
        "task_create_missing_queues": True,
        "task_soft_time_limit": s.task_soft_time_limit,
        "task_time_limit": s.task_time_limit,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "result_expires": s.result_expires,
        "result_extended": False,
        "result_chord_join_timeout": 30.0,
        "timezone": "UTC",
        "enable_utc": True,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "beat_scheduler": "beatflow.scheduler.beat:BeatflowScheduler",
        "beat_max_loop_interval": s.beat_loop_interval,
        **connections.redbeat_config(
            s.effective_redbeat_url, timeout=max(0.2, s.beat_lock_timeout / 3)
        ),
        "redbeat_key_prefix": keys.REDBEAT_PREFIX,
        "redbeat_lock_key": keys.LOCK,
        "redbeat_lock_timeout": s.beat_lock_timeout,
    }
    return celery_passthrough.apply(config, s.celery_overrides)
