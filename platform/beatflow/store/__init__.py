"""The results database: DAG runs, task runs claimed by dedupe key (the claim protocol), dead
letters, pause switches and retention, on PostgreSQL or SQLite. The only package that imports
SQLAlchemy; everything above it sees records and beatflow errors.

``Store`` is assembled from one part per aggregate, each a module with its own public methods:

    run_creation   creating DAG runs (trigger, beat fires behind the fence, backfill): one way
    dag_runs       a run's transitions and the reconciler's, scheduler's and CLI's reads
    dispatch       queued -> running under max_active_runs
    beat_terms     the beat leader's epoch fence
    task_runs      the claim protocol: claim, renew, finish, fail
    task_states    decided states, deduped rows, task-run reads, replay's reset
    hot            the node wrapper's read-and-claim and finish-and-close
    fan_ins        a .map() expansion's items and fan-in
    sensor_pokes   a sensor's pokes in reschedule mode (its next poke, first poke, count)
    dead_letters   failed task runs kept for replay
    notifications  the notifier events' outbox (at most one send per event)
    pools          pools' slot limits, claimed with the claim and given back with the finish
    backfills      backfills: their plan of runs and how many they released
    run_control    operators' cancel, clear and mark
    audit          who did what, when and why
    task_logs      captured task output
    maintenance    pause switches and retention
    browse         the web UI's reads

Below them: ``base`` (StoreBase), ``db`` (the engine and its transactions), ``backends``
(PostgreSQL's and SQLite's differences, chosen once), the statements they share (``sql``,
``rows``, ``claim_sql``, ``node_sql``, ``fan_in_sql``, ``driver``), ``schema`` and
``migrations`` with the PostgreSQL functions' bodies in ``functions/``."""

from __future__ import annotations

from beatflow.store.records import (
    AuditNote,
    Claim,
    DagRunRecord,
    DeadLetterDraft,
    DeadLetterRecord,
    FinishedRun,
    SensorPokes,
    TaskRunEnded,
    TaskRunRecord,
    TriggeredRun,
)
from beatflow.store.store import Store

__all__ = [
    "AuditNote",
    "Claim",
    "DagRunRecord",
    "DeadLetterDraft",
    "DeadLetterRecord",
    "SensorPokes",
    "Store",
    "TaskRunEnded",
    "TaskRunRecord",
    "FinishedRun",
    "TriggeredRun",
]
