"""DAG runs: trigger them (runs.trigger), send them (runs.dispatch), follow them (runs.follow),
close them (runs.close), and the operator's verbs (runs.operator, runs.controls, runs.backfill,
runs.replay). Every public function takes the process's :class:`beatflow.runtime.Runtime`."""

from __future__ import annotations

from beatflow.runs.close import close_run
from beatflow.runs.dispatch import dispatch_waiting
from beatflow.runs.follow import follow_run
from beatflow.runs.trigger import (
    RunRequest,
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
