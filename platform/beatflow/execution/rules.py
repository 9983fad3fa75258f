"""Trigger rules: given the final states of a task's upstream task runs, decide whether it runs,
is skipped, or is marked upstream_failed. Pure functions, the same rules Airflow users know."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from beatflow.dag.model import TRIGGER_RULES
from beatflow.states import TASK_RUN_FAILED, TASK_RUN_FINAL, DagRunState, TaskRunState

Decision = Literal["run", "skipped", "upstream_failed"]


def decide(rule: str, upstream_states: Sequence[str]) -> Decision:
    """The decision for ``rule`` given every upstream task run's final state."""
    if rule not in TRIGGER_RULES:
        raise ValueError(f"unknown trigger rule {rule!r}")
    if not upstream_states or rule in ("always", "all_done"):
        return "run"
    n = len(upstream_states)
    success = sum(s == TaskRunState.SUCCESS for s in upstream_states)
    failed = sum(s in TASK_RUN_FAILED for s in upstream_states)
    skipped = sum(s == TaskRunState.SKIPPED for s in upstream_states)
    if rule == "all_success":
        if success == n:
            return "run"
        return "upstream_failed" if failed else "skipped"
    if rule == "all_failed":
        return "run" if failed == n else "skipped"
    if rule == "one_success":
        if success:
            return "run"
        return "skipped" if skipped == n else "upstream_failed"
    if rule == "one_failed":
        return "run" if failed else "skipped"
    if rule == "none_failed":
        return "upstream_failed" if failed else "run"
    if rule == "none_failed_min_one_success":
        if failed:
            return "upstream_failed"
        return "run" if success else "skipped"
    return "skipped" if skipped else "run"  # none_skipped


def dag_run_state(task_states: Sequence[str]) -> DagRunState | None:
    """The state of a DAG run from ALL its task runs' states, or None while it is not final.

    Empty, or any state that is not final (running, up_for_retry), is not final: nothing is
    inferred from rows that are missing or unfinished. ``decide.run_outcome`` also checks that
    every task of the DAG (every map instance) has a row; use it where the DAG is known.
    """
    if not task_states or any(s not in TASK_RUN_FINAL for s in task_states):
        return None
    failed = any(s in TASK_RUN_FAILED for s in task_states)
    return DagRunState.FAILED if failed else DagRunState.SUCCESS
