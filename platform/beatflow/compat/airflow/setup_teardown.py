"""Airflow's setup and teardown tasks: ``op.as_setup()``, ``op.as_teardown(setups=...)``,
``@setup`` / ``@teardown`` and ``with teardown_task:`` (the tasks made in the block run between
its setups and it).

A teardown runs once its upstream tasks are done whatever their state (the trigger rule
``all_done``), unless it has setups and none of them succeeded (Airflow's
``all_done_setup_success``: all skipped, it is skipped; none succeeded, it fails without
running). Its own failure does not fail the DAG run (``TaskSpec.fails_run``) unless
``on_failure_fail_dagrun=True``; the run still waits for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from beatflow.dag.flow import Skip

if TYPE_CHECKING:
    from beatflow.compat.airflow.operators import BaseOperator


class SetupFailed(Exception):
    """No setup task of a teardown succeeded: it fails without running (no retry)."""

    final = True  # attempt.handle_failure: no retry


def mark_setup(op: BaseOperator) -> None:
    op.is_setup = True


def mark_teardown(op: BaseOperator, setups: Any, on_failure_fail_dagrun: bool | None) -> None:
    from beatflow.compat.airflow.dag import link, operators_of

    op.is_teardown = True
    op.trigger_rule = "all_done"
    op.spec.fails_run = bool(on_failure_fail_dagrun)
    if setups is not None:
        for setup in operators_of(setups, "leaves"):
            mark_setup(setup)
            link(setup, op)


def setups_of(op: BaseOperator) -> list[str]:
    """The setup tasks directly upstream of a teardown (its data inputs included)."""
    ops = op.dag.operators
    ups = set(op.spec.order_upstream) | op.xcom_inputs()
    return sorted(t for t in ups if t in ops and ops[t].is_setup)


def check_setups(op: BaseOperator, ti: Any) -> None:
    """Before a teardown runs: skip it when all its setups were skipped, fail it when none of
    them succeeded (their states read from the results database)."""
    from celery import current_task

    from beatflow.runtime import runtime_of
    from beatflow.states import TaskRunState

    setups = setups_of(op)
    if not setups:
        return
    store = runtime_of(current_task.app).store
    rows = [r for r in store.get_task_runs(ti.dag_id, ti.run_id, setups) if r.map_index < 0]
    states = [r.state for r in rows]
    if states and all(s == TaskRunState.SKIPPED for s in states):
        raise Skip(f"its setup tasks ({', '.join(setups)}) were skipped")
    if not any(s == TaskRunState.SUCCESS for s in states):
        raise SetupFailed(f"none of its setup tasks ({', '.join(setups)}) succeeded")


class Block:
    """``with teardown_task:`` (or ``with teardown(setup()):``): every task made inside the
    block without an upstream in it comes after the teardown's setups, every one without a
    downstream in it before the teardown."""

    def __init__(self, teardown: BaseOperator) -> None:
        self.teardown = teardown
        self.before: set[str] = set()

    def __enter__(self) -> Block:
        self.before = set(self.teardown.dag.operators)
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        from beatflow.compat.airflow.dag import link

        ops: Mapping[str, BaseOperator] = self.teardown.dag.operators
        setups = [ops[t] for t in setups_of(self.teardown)]
        ends = {self.teardown.task_id, *(s.task_id for s in setups)}
        made = [t for t in ops if t not in self.before and t not in ends]
        ups = {t: (set(ops[t].spec.order_upstream) | ops[t].xcom_inputs()) for t in made}
        has_down = {u for t in made for u in ups[t]}
        for t in made:
            if not ups[t] & set(made):
                for setup in setups:
                    link(setup, ops[t])
            if t not in has_down:
                link(ops[t], self.teardown)
