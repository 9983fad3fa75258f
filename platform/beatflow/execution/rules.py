"""Trigger rules: given the final states of a task's upstream task runs, decide whether it runs,
is skipped, or is marked upstream_failed. Pure functions, the same rules Airflow users know."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Decision = Literal["run", "skipped", "upstream_failed"]
FAILED = frozenset({"failed", "upstream_failed"})
DONE = frozenset({"success", "failed", "upstream_failed", "skipped"})


def decide(rule: str, upstream_states: Sequence[str]) -> Decision:
    """The decision for ``rule`` given every upstream task run's final state."""
    if not upstream_states or rule == "always":
        return "run"
    n = len(upstream_states)
    success = sum(s == "success" for s in upstream_states)
    failed = sum(s in FAILED for s in upstream_states)
    skipped = sum(s == "skipped" for s in upstream_states)
    if rule == "all_success":
        if success == n:
            return "run"
        return "upstream_failed" if failed else "skipped"
    if rule == "all_done":
        return "run"
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
    if rule == "none_skipped":
        return "skipped" if skipped else "run"
    raise ValueError(f"unknown trigger rule {rule!r}")


def dag_run_state(task_states: Sequence[str]) -> str:
    """A finished DAG run fails if any of its task runs failed or could not run for it."""
    return "failed" if any(s in FAILED for s in task_states) else "success"
