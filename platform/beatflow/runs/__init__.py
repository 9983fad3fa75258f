"""Triggering and following DAG runs (the Python API behind `beatflow dags trigger`)."""

from __future__ import annotations

from beatflow.runs.follow import follow_run
from beatflow.runs.lifecycle import (
    close_run,
    dispatch_waiting,
    make_run_id,
    trigger_dag,
)

__all__ = ["close_run", "dispatch_waiting", "follow_run", "make_run_id", "trigger_dag"]
