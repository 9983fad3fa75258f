"""Start-up checks of the beat: the Redis eviction policy must not be able to drop the schedule,
the watermarks or the lock (R12)."""

from __future__ import annotations

import logging

import redis

log = logging.getLogger(__name__)

SAFE_POLICIES = frozenset({"noeviction"})


def check_eviction_policy(client: redis.Redis) -> str | None:
    """Return a warning (also logged) when Redis may evict beat keys; None when it cannot."""
    try:
        policy = str(client.config_get("maxmemory-policy").get("maxmemory-policy", ""))
    except redis.RedisError as exc:
        log.info(
            "beat: could not read Redis maxmemory-policy (%s); make sure it is noeviction", exc
        )
        return None
    if policy in SAFE_POLICIES or not policy:
        return None
    if policy.startswith("volatile"):
        consequence = (
            "keys with a TTL (the beat lock) can be evicted under memory pressure, "
            "which hands leadership to another beat early"
        )
    else:
        consequence = (
            "any key can be evicted under memory pressure: schedule entries and "
            "watermarks would vanish and ticks could be fired again or skipped"
        )
    message = (
        f"Redis maxmemory-policy is {policy!r}: {consequence}. Set "
        "maxmemory-policy noeviction on the Redis that BEATFLOW_REDBEAT_URL points to, "
        "or give the beat a Redis of its own."
    )
    log.warning("beat: %s", message)
    return message
