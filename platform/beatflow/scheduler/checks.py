"""Checks of the beat: the Redis eviction policy must not be able to drop the schedule, the
watermarks or the lock (their loss would skip or repeat ticks); a scheduled DAG must be able
to start without a conf."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

from beatflow.dag.model import DAG
from beatflow.errors import ConfError

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


def schedule_problems(dags: Iterable[DAG]) -> list[str]:
    """Scheduled DAGs whose runs could never start: a scheduled run has no conf, so every
    required param needs a default. (The beat records such ticks as failed runs.)"""
    problems = []
    for dag in dags:
        if dag.schedule is None:
            continue
        try:
            dag.resolve_conf(None)
        except ConfError as exc:
            problems.append(
                f"DAG {dag.dag_id!r} is scheduled but its scheduled runs cannot start "
                f"({'; '.join(exc.problems)}): give those params a default or drop the schedule"
            )
    return problems
