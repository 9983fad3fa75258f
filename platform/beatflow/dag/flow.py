"""Control flow, as Airflow users know it: ``@task.branch`` (follow some direct downstream tasks,
skip the others), ``@task.short_circuit`` (a falsy result skips what follows) and ``raise
Skip("why")`` (end this task run ``skipped``).

The decision is data, never a message: a branch task's result *is* the list of task ids it
followed, and a short-circuit task's result is its value, both written with its success row in
the results database (one statement, under its lease). A downstream task reads that row before it
decides (``gates``, ``skipped_by``), so a worker killed during the decision loses nothing (the
task runs again and decides again) and no task is skipped or run twice (dedupe keys)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, overload

from beatflow.dag import authoring, groups, model
from beatflow.errors import DagDefinitionError
from beatflow.states import TaskRunState

__all__ = ["Skip", "task"]

BRANCH = "branch"
SHORT_CIRCUIT = "short_circuit"  # a falsy result skips every task downstream
SHORT_CIRCUIT_DIRECT = "short_circuit_direct"  # only the direct downstream; the rest by rule
CONTROLS = (BRANCH, SHORT_CIRCUIT, SHORT_CIRCUIT_DIRECT)


class Skip(Exception):  # the name users raise, as Airflow's AirflowSkipException
    """Raise from a task to end its task run ``skipped`` with ``reason`` (shown by ``runs show``,
    the web UI and the API); its downstream tasks then decide by their trigger rules."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class ControlTask(authoring.Task):
    """A task whose result decides which downstream tasks run (a branch, a short-circuit)."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any], control: str) -> None:
        super().__init__(fn, options)
        self.control = control

    def override(self, **options: Any) -> ControlTask:
        return ControlTask(self.fn, {**self.options, **options}, self.control)

    def map(self, over: authoring.TaskRef, *args: Any, **kwargs: Any) -> authoring.TaskRef:
        file, line = authoring._caller()
        raise DagDefinitionError(
            f"{self.fn.__name__}: a {self.control.split('_direct')[0]} task cannot be .map()ped "
            "(one decision per run)",
            file=file,
            line=line,
        )

    def _add(
        self,
        dag: model.DAG,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        map_over: str | None,
    ) -> authoring.TaskRef:
        ref = super()._add(dag, args, kwargs, map_over)
        dag.tasks[ref.task_id].control = self.control
        return ref


def _decorator(control: str, fn: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
    if fn is not None:
        return ControlTask(fn, options, control)
    return lambda f: ControlTask(f, options, control)


class TaskDecorator:
    """``beatflow.task``: ``@task``, ``@task(retries=3, ...)``, ``@task.branch``,
    ``@task.short_circuit`` and ``@task.sensor``."""

    @overload
    def __call__(self, fn: Callable[..., Any], /) -> authoring.Task: ...
    @overload
    def __call__(
        self, fn: None = None, /, **options: Any
    ) -> Callable[[Callable[..., Any]], authoring.Task]: ...

    def __call__(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        return authoring.task(fn, **options) if fn is not None else authoring.task(**options)

    def branch(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """``@task.branch``: the function returns the task id (or list of ids) of the direct
        downstream tasks to follow, or None for none; the other direct downstream tasks are
        skipped, and what follows them decides by its trigger rule. A task group's id follows
        the group's root tasks."""
        return _decorator(BRANCH, fn, options)

    def short_circuit(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        ignore_downstream_trigger_rules: bool = True,
        **options: Any,
    ) -> Any:
        """``@task.short_circuit``: a falsy result skips every task downstream whatever its
        trigger rule (or, with ``ignore_downstream_trigger_rules=False``, only the direct
        downstream, the rest by trigger rule); a truthy one is passed on as the result."""
        control = SHORT_CIRCUIT if ignore_downstream_trigger_rules else SHORT_CIRCUIT_DIRECT
        return _decorator(control, fn, options)

    def sensor(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """``@task.sensor(poke_interval=60, timeout=..., mode="reschedule" | "poke",
        soft_fail=False, exponential_backoff=False, max_wait=None)``: the function pokes and
        returns a bool, a value (truthy: done, the value is the result) or a
        ``beatflow.PokeResult``; see ``beatflow.dag.sensors``."""
        from beatflow.dag import sensors

        return sensors.sensor(fn, options)


task = TaskDecorator()


# ---------------------------------------------------------------------- at run time


def outcome(dag: model.DAG, spec: model.TaskSpec, value: Any) -> Any:
    """The result a control task records: a branch's followed task ids (a list, checked against
    its direct downstream), a short-circuit's value as it is. Raises ValueError or TypeError,
    with the reason, for a branch that names a task it cannot follow."""
    if spec.control != BRANCH:
        return value
    if value is None:
        chosen: list[str] = []
    elif isinstance(value, str):
        chosen = [value]
    elif isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(v, str) for v in value
    ):
        chosen = list(dict.fromkeys(sorted(value) if isinstance(value, set | frozenset) else value))
    else:
        raise TypeError(
            f'branch task "{spec.task_id}" must return a task id, a list of task ids or None, '
            f"got {type(value).__name__}"
        )
    direct = sorted(t for t, up in dag.upstream_map().items() if spec.task_id in up)
    chosen = list(dict.fromkeys(t for c in chosen for t in _follow(dag, spec, c, direct)))
    unknown = [t for t in chosen if t not in direct]
    if unknown:
        raise ValueError(
            f'branch task "{spec.task_id}" returned {", ".join(map(repr, unknown))}, not one of '
            f"its direct downstream tasks ({', '.join(direct) or 'none'})"
        )
    return chosen


def _follow(dag: model.DAG, spec: model.TaskSpec, chosen: str, direct: list[str]) -> list[str]:
    """The task ids one returned id follows: itself, or, for a task group's id (not also a
    task's), the group's root tasks that are direct downstream of the branch (as Airflow)."""
    if chosen in dag.tasks or chosen not in dag.groups:
        return [chosen]
    inside = groups.members(dag, chosen)
    below = set(inside)
    roots = [t for t in inside if not dag.tasks[t].upstream & below and t in direct]
    if not roots:
        raise ValueError(
            f'branch task "{spec.task_id}" returned the task group {chosen!r}, none of whose '
            f"root tasks is one of its direct downstream tasks ({', '.join(direct) or 'none'}); "
            f"write {spec.task_id} >> {chosen}"
        )
    return roots


@dataclass(frozen=True, slots=True)
class Gate:
    """A control task upstream of a task (directly, or anywhere above it for a short-circuit
    that skips everything downstream) whose recorded result may skip it."""

    task_id: str  # the branch or short-circuit task
    kind: str  # BRANCH or SHORT_CIRCUIT
    # a branch: the followed ids that keep the task (itself, and the branch's direct downstream
    # tasks it is downstream of: Airflow skips no task downstream of a followed one)
    keeps: frozenset[str] = frozenset()


class GateRow(Protocol):
    @property
    def task_id(self) -> str: ...
    @property
    def map_index(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def result(self) -> Any: ...


def skipped_by(gates: Iterable[Gate], rows: Iterable[GateRow]) -> str | None:
    """Why a task is skipped by the recorded decision of a control task above it, or None.
    A control task that did not succeed (or has no row yet) decides nothing here: the trigger
    rules take it from there."""
    recorded = {r.task_id: r for r in rows if r.map_index < 0}
    for gate in gates:
        row = recorded.get(gate.task_id)
        if row is None or row.state != TaskRunState.SUCCESS:
            continue
        if gate.kind == BRANCH:
            chosen = [str(c) for c in row.result] if isinstance(row.result, list) else []
            if not gate.keeps.intersection(chosen):
                return f"branch {gate.task_id} followed {', '.join(chosen) or 'no task'}"
        elif not row.result:
            return f"short-circuit {gate.task_id} returned {str(row.result)[:40]}"
    return None


# id(dag) -> (the DAG, every task's gates); the DAG is held so that its id is not reused
_CACHE: dict[int, tuple[model.DAG, dict[str, tuple[Gate, ...]]]] = {}
_CACHE_SIZE = 256


def gates(dag: model.DAG, task_id: str) -> tuple[Gate, ...]:
    """The control tasks whose recorded decision may skip ``task_id`` (computed once per DAG)."""
    cached = _CACHE.get(id(dag))
    if cached is None or cached[0] is not dag:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        cached = _CACHE[id(dag)] = (dag, _all_gates(dag))
    return cached[1].get(task_id, ())


def _all_gates(dag: model.DAG) -> dict[str, tuple[Gate, ...]]:
    controls = [s for s in dag.tasks.values() if s.control is not None]
    if not controls:
        return {}
    down = dag.downstream_map()
    below = functools.cache(lambda t: _descendants(down, t))
    found: dict[str, list[Gate]] = {}
    for spec in controls:
        children = down.get(spec.task_id, set())
        if spec.control == BRANCH:
            for child in children:
                keeps = {child} | {c for c in children if child in below(c)}
                found.setdefault(child, []).append(Gate(spec.task_id, BRANCH, frozenset(keeps)))
            continue
        targets = children if spec.control == SHORT_CIRCUIT_DIRECT else below(spec.task_id)
        for target in targets:
            found.setdefault(target, []).append(Gate(spec.task_id, SHORT_CIRCUIT))
    return {t: tuple(sorted(g, key=lambda g: g.task_id)) for t, g in found.items()}


def _descendants(down: Mapping[str, set[str]], start: str) -> frozenset[str]:
    seen: set[str] = set()
    todo = list(down.get(start, ()))
    while todo:
        t = todo.pop()
        if t not in seen:
            seen.add(t)
            todo.extend(down.get(t, ()))
    return frozenset(seen)
