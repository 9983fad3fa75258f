"""Redis key names of the beat (documented in ``beatflow.scheduler``'s docstring)."""

from __future__ import annotations

LOCK = "beatflow:redbeat::lock"
EPOCH = "beatflow:beat:epoch"
LEADER = "beatflow:beat:leader"
REPLICA_PREFIX = "beatflow:beat:replica:"
SCHEDULE = "beatflow:redbeat::schedule"
ENTRY_PREFIX = "beatflow:redbeat:dag:"
FINGERPRINTS = "beatflow:redbeat::fingerprints"
WATERMARK = "beatflow:beat:watermark"


def entry_key(dag_id: str) -> str:
    return ENTRY_PREFIX + dag_id


def dag_id_of(entry: str) -> str:
    return entry[len(ENTRY_PREFIX) :] if entry.startswith(ENTRY_PREFIX) else entry


def replica_key(instance: str) -> str:
    return REPLICA_PREFIX + instance
