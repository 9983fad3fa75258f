"""Triggering and following DAG runs (the Python API behind `beatflow dags trigger`)."""

from __future__ import annotations

from beatflow.runs.follow import follow_run
from beatflow.runs.lifecycle import (
    RunRequest,
    close_run,
    dispatch_waiting,
    make_run_id,
    trigger_and_follow,
    trigger_dag,
    trigger_dags,
)

__all__ = [
    "RunRequest",
    "close_run",
    "dispatch_waiting",
    "follow_run",
    "make_run_id",
    "trigger_and_follow",
    "trigger_dag",
    "trigger_dags",
]
