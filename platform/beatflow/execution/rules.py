"""Trigger rules: given the final states of a task's upstream task runs, decide whether it runs,
is skipped, or is marked upstream_failed. Pure functions, the same rules Airflow users know."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from beatflow.dag.model import TRIGGER_RULES
from beatflow.states import TASK_RUN_FAILED, TASK_RUN_FINAL, DagRunState, TaskRunState

Decision = Literal["run", "skipped", "upstream_failed"]


@dataclass(frozen=True, slots=True)
class _Counts:
    n: int  # upstream task runs
    success: int
    failed: int  # failed, upstream_failed or cancelled (TASK_RUN_FAILED)
    skipped: int
    ran_and_failed: int  # failed itself (Airflow's one_done counts only these)


def _rule_table() -> dict[str, Callable[[_Counts], Decision]]:
    def all_success(c: _Counts) -> Decision:
        if c.success == c.n:
            return "run"
        return "upstream_failed" if c.failed else "skipped"

    def one_success(c: _Counts) -> Decision:
        if c.success:
            return "run"
        return "skipped" if c.skipped == c.n else "upstream_failed"

    def none_failed_min_one_success(c: _Counts) -> Decision:
        if c.failed:
            return "upstream_failed"
        return "run" if c.success else "skipped"

    return {
        "all_success": all_success,
        "all_failed": lambda c: "run" if c.failed == c.n else "skipped",
        "one_success": one_success,
        "one_failed": lambda c: "run" if c.failed else "skipped",
        "none_failed": lambda c: "upstream_failed" if c.failed else "run",
        "none_failed_min_one_success": none_failed_min_one_success,
        "none_skipped": lambda c: "skipped" if c.skipped else "run",
        # one succeeded or failed itself (an upstream_failed one never ran)
        "one_done": lambda c: "run" if c.success or c.ran_and_failed else "skipped",
        "all_skipped": lambda c: "run" if c.skipped == c.n else "skipped",
        "all_done_min_one_success": lambda c: "run" if c.success else "skipped",
    }


_RULES = _rule_table()


def decide(rule: str, upstream_states: Sequence[str]) -> Decision:
    """The decision for ``rule`` given every upstream task run's final state."""
    if rule not in TRIGGER_RULES:
        raise ValueError(f"unknown trigger rule {rule!r}")
    if not upstream_states or rule in ("always", "all_done"):
        return "run"
    counts = _Counts(
        n=len(upstream_states),
        success=sum(s == TaskRunState.SUCCESS for s in upstream_states),
        failed=sum(s in TASK_RUN_FAILED for s in upstream_states),
        skipped=sum(s == TaskRunState.SKIPPED for s in upstream_states),
        ran_and_failed=sum(s == TaskRunState.FAILED for s in upstream_states),
    )
    return _RULES[rule](counts)


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
