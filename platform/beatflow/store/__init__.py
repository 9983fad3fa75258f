"""The results database: DAG runs, task runs claimed by dedupe key (the claim protocol), dead
letters, pause switches and retention, on PostgreSQL or SQLite. The only package that imports
SQLAlchemy; everything above it sees records and beatflow errors."""

from __future__ import annotations

from beatflow.store.records import (
    Claim,
    DagRunRecord,
    DeadLetterDraft,
    DeadLetterRecord,
    FinishedRun,
    TaskRunEnded,
    TaskRunRecord,
    TriggeredRun,
)
from beatflow.store.store import Store

__all__ = [
    "Claim",
    "DagRunRecord",
    "DeadLetterDraft",
    "DeadLetterRecord",
    "Store",
    "TaskRunEnded",
    "TaskRunRecord",
    "FinishedRun",
    "TriggeredRun",
]
