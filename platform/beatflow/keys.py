"""Every Redis key (and pub/sub channel) name beatflow writes, in one place: the beat's, the
reconciler's lease, the broker's write probe, the exporter's SLA set and the run events' channel.
Imports nothing; the layout of the beat's keys is drawn in ``beatflow.scheduler``'s docstring."""

from __future__ import annotations

# the beat (RedBeat's layout under our prefix, plus the election's own keys)
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

# the reconciler's lease: whichever worker holds it runs the pass
RECONCILER_LEASE = "beatflow:reconciler:lease"
# the broker transport's probe that a refusing Redis takes writes again
BROKER_PROBE = "beatflow:broker:writable"
# the exporter's zset of SLA misses already counted (member: run, score: unix time)
SLA_REPORTED = "beatflow:exporter:sla_reported"
# run events on pub/sub: one channel per DAG run, <prefix><dag_id>/<run_id>
RUN_EVENTS_PREFIX = "beatflow:run-events:"


def entry_key(dag_id: str) -> str:
    return ENTRY_PREFIX + dag_id


def dag_id_of(entry: str) -> str:
    return entry[len(ENTRY_PREFIX) :] if entry.startswith(ENTRY_PREFIX) else entry


def is_dag_entry(entry: str) -> bool:
    """A DAG's entry (else a plain RedBeat entry saved by a user or declared in beat_schedule)."""
    return entry.startswith(ENTRY_PREFIX)


def replica_key(instance: str) -> str:
    return REPLICA_PREFIX + instance
