"""Redis key names of the beat (documented in ``beatflow.scheduler``'s docstring)."""

from __future__ import annotations

REDBEAT_PREFIX = "beatflow:redbeat:"  # RedBeat's key prefix: a plain entry is <prefix><name>
LOCK = "beatflow:redbeat::lock"
EPOCH = "beatflow:beat:epoch"
LEADER = "beatflow:beat:leader"
REPLICA_PREFIX = "beatflow:beat:replica:"
SCHEDULE = "beatflow:redbeat::schedule"
ENTRY_PREFIX = "beatflow:redbeat:dag:"
FINGERPRINTS = "beatflow:redbeat::fingerprints"
STATICS = "beatflow:redbeat::statics"  # RedBeat's set of declared (beat_schedule) entries
WATERMARK = "beatflow:beat:watermark"
SPEC_FIELD = "beatflow"  # the DAG entry's hash field holding beatflow's schedule spec


def entry_key(dag_id: str) -> str:
    return ENTRY_PREFIX + dag_id


def dag_id_of(entry: str) -> str:
    return entry[len(ENTRY_PREFIX) :] if entry.startswith(ENTRY_PREFIX) else entry


def is_dag_entry(entry: str) -> bool:
    """A DAG's entry (else a plain RedBeat entry saved by a user or declared in beat_schedule)."""
    return entry.startswith(ENTRY_PREFIX)


def replica_key(instance: str) -> str:
    return REPLICA_PREFIX + instance
