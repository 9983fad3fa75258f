"""The DAG model: DAG, TaskSpec, edges, params, validation and topology. Pure Python: it knows
nothing of Celery, Redis or SQL, so cycles and topology are plain unit tests."""

from __future__ import annotations

import difflib
import functools
import graphlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from beatflow.dag import graph
from beatflow.dag import params as params_mod
from beatflow.dag.params import Param, param_from
from beatflow.dag.schedule import Schedule
from beatflow.errors import DagDefinitionError

__all__ = ["DAG", "Param", "Ref", "RetryPolicy", "TaskSpec", "param_from"]

if TYPE_CHECKING:
    from beatflow.dag.sensors import SensorSpec

TRIGGER_RULES = (
    "all_success",
    "all_done",
    "all_failed",
    "one_success",
    "one_failed",
    "none_failed",
    "none_failed_min_one_success",
    "none_skipped",
    "always",
    "one_done",
    "all_skipped",
    "all_done_min_one_success",
)

# what a callback is called for: on_<event>_callback (task level: every one; DAG level: success
# and failure, at the run's end)
CALLBACK_EVENTS = ("success", "failure", "retry", "skipped")
DAG_CALLBACK_EVENTS = ("success", "failure")
Callbacks = Mapping[str, tuple[Callable[..., Any], ...]]


def callback_list(value: Any) -> tuple[Callable[..., Any], ...] | None:
    """An ``on_*_callback`` option as a tuple of callables (a callable, a notifier, or a list
    of them; None: none), or None when it is not one."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not all(callable(item) for item in items):
        return None
    return tuple(items)


@dataclass(frozen=True, slots=True)
class Ref:
    """An input that is another task's result (a data edge)."""

    task_id: str


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries with exponential backoff, a cap and (full) jitter."""

    retries: int = 0
    delay: float = 1.0  # seconds before the first retry
    backoff: float = 2.0  # multiplier per try
    max_delay: float = 300.0
    jitter: bool = True

    def delay_for(self, try_number: int, rand: float = 1.0) -> float:
        """Seconds to wait after failed try ``try_number`` (1-based); ``rand`` in [0, 1]."""
        base = min(self.max_delay, self.delay * self.backoff ** max(0, try_number - 1))
        if self.jitter:
            # "equal jitter": never less than half the base, so backoff still grows
            return base / 2 + base / 2 * rand
        return base


@dataclass(slots=True)
class TaskSpec:
    """One task of a DAG: the function, its inputs, its options, where it was written."""

    task_id: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    soft_time_limit: float | None = None
    time_limit: float | None = None
    queue: str | None = None
    priority: int | None = None
    pool: str | None = None  # a pool (``beatflow pools``) whose slots the task takes while running
    pool_slots: int = 1
    trigger_rule: str = "all_success"
    dedupe_key: str | Callable[..., str] | None = None
    map_over: str | None = None  # upstream task id whose result list this task is mapped over
    control: str | None = None  # a branch or short-circuit task (dag/flow.py): its result decides
    sensor: SensorSpec | None = None  # a sensor's options (dag/sensors.py): its function pokes
    order_upstream: set[str] = field(default_factory=set)
    # deprecated (on_retry_callback, on_failure_callback): called as fn(dag_id=, run_id=,
    # task_id=, error=) after a failed try that will be retried, and after the last try failed
    on_retry: Callable[..., Any] | None = None
    on_failure: Callable[..., Any] | None = None
    # on_<event>_callback: event -> callables and notifiers, each called with the context
    callbacks: Callbacks = field(default_factory=dict)
    file: str | None = None
    line: int | None = None
    outlets: tuple[str, ...] = ()  # the assets its success marks updated (dag.assets)
    # whether its failure fails the DAG run (False: a teardown task, as Airflow's, whose
    # failure is not the run's; the run still waits for it to end)
    fails_run: bool = True

    @property
    def argument_upstream(self) -> set[str]:
        """The tasks whose results this task's arguments name (its ``.map()`` source aside)."""
        refs = {a.task_id for a in _walk_refs(self.args)}
        return refs | {a.task_id for a in _walk_refs(tuple(self.kwargs.values()))}

    @property
    def data_upstream(self) -> set[str]:
        refs = self.argument_upstream
        if self.map_over:
            refs.add(self.map_over)
        return refs

    @property
    def upstream(self) -> set[str]:
        return self.data_upstream | self.order_upstream

    @property
    def wants_context(self) -> bool:
        try:
            return _takes_ctx(self.fn)
        except TypeError:  # an unhashable callable: look each time
            return _takes_ctx.__wrapped__(self.fn)


@functools.lru_cache(maxsize=4096)
def _takes_ctx(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a ``ctx`` parameter (read once per function: a signature costs more
    than the rest of the node wrapper's Python work on a task run)."""
    try:
        return "ctx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def map_leaves(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with every leaf replaced by ``fn(leaf)``: lists, tuples and dict values are
    walked (and rebuilt as lists, tuples and dicts with the same keys); anything else is a leaf.
    The one walk over a task's arguments (references to upstream results live in them)."""
    if isinstance(value, list):
        return [map_leaves(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(map_leaves(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    return fn(value)


def _walk_refs(values: Iterable[Any]) -> list[Ref]:
    refs: list[Ref] = []

    def collect(leaf: Any) -> Any:
        if isinstance(leaf, Ref):
            refs.append(leaf)
        return leaf

    map_leaves(list(values), collect)
    return refs


@dataclass(slots=True)
class DAG:
    """A DAG definition: tasks, edges, schedule and run options."""

    dag_id: str
    schedule: Schedule | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    timezone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    catchup: bool = False
    max_active_runs: int = 16
    tags: tuple[str, ...] = ()
    sla: timedelta | None = None
    dagrun_timeout: timedelta | None = None  # past it a running run is failed (the reconciler)
    params: dict[str, Param] = field(default_factory=dict)
    description: str = ""
    on_failure: Callable[..., Any] | None = None
    on_sla_miss: Callable[..., Any] | None = None
    callbacks: Callbacks = field(default_factory=dict)  # on_success/on_failure_callback
    file: str | None = None
    line: int | None = None
    defaults: dict[str, Any] = field(default_factory=dict)  # default_args for its tasks
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    asset_schedule: Any = None  # a dag.assets condition: runs when its assets are updated
    open_conf: bool = False  # a trigger's conf may hold keys that are not params (Airflow's)
    groups: dict[str, Any] = field(default_factory=dict)  # task groups: dag/groups.py GroupSpec
    plan_cache: Any = field(default=None, repr=False, compare=False)  # set by dag.compile

    # ------------------------------------------------------------------ building

    def add_task(self, spec: TaskSpec) -> None:
        if spec.task_id in self.tasks:
            first = self.tasks[spec.task_id]
            raise DagDefinitionError(
                f'duplicate task id "{spec.task_id}" in DAG "{self.dag_id}" (first defined at '
                f"{first.file}:{first.line}); pass task_id=... to tell them apart",
                file=spec.file,
                line=spec.line,
            )
        self.tasks[spec.task_id] = spec

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        """Raise DagDefinitionError for an unknown dependency or a cycle, naming file and line."""
        for spec in self.tasks.values():
            for up in sorted(spec.upstream):
                if up not in self.tasks:
                    close = difflib.get_close_matches(up, list(self.tasks), n=1)
                    hint = f'; did you mean "{close[0]}"?' if close else ""
                    raise DagDefinitionError(
                        f'task "{spec.task_id}" depends on unknown task "{up}"{hint}',
                        file=spec.file,
                        line=spec.line,
                    )
        cycle = self.find_cycle()
        if cycle:
            first = self.tasks[cycle[0]]
            raise DagDefinitionError(
                f'DAG "{self.dag_id}" has a cycle: {" -> ".join(cycle)}',
                file=first.file,
                line=first.line,
            )
        if (
            self.start_date is not None
            and self.end_date is not None
            and self.end_date <= self.start_date
        ):
            raise DagDefinitionError(
                f'DAG "{self.dag_id}": end_date {self.end_date} is not after start_date '
                f"{self.start_date}",
                file=self.file,
                line=self.line,
            )

    def find_cycle(self) -> list[str]:
        """A cycle as a path ``[a, b, ..., a]`` (each task upstream of the next, starting at
        the smallest id), or ``[]`` if the DAG is acyclic."""
        return graph.find_cycle({tid: spec.upstream for tid, spec in self.tasks.items()})

    # ------------------------------------------------------------------ topology

    def upstream_map(self) -> dict[str, set[str]]:
        return {tid: set(spec.upstream) for tid, spec in self.tasks.items()}

    def downstream_map(self) -> dict[str, set[str]]:
        down: dict[str, set[str]] = {tid: set() for tid in self.tasks}
        for tid, spec in self.tasks.items():
            for up in spec.upstream:
                if up in down:
                    down[up].add(tid)
        return down

    def topological_order(self) -> list[str]:
        """Task ids so that every task comes after its upstream; ties in definition order."""
        try:
            return graph.topological_order(self.upstream_map())
        except graphlib.CycleError as exc:
            cycle = graph.cycle_path(exc)
            first = self.tasks[cycle[0]]
            raise DagDefinitionError(
                f'DAG "{self.dag_id}" has a cycle: {" -> ".join(cycle)}',
                file=first.file,
                line=first.line,
            ) from None

    def roots(self) -> list[str]:
        return [t for t in self.tasks if not self.tasks[t].upstream]

    def leaves(self) -> list[str]:
        down = self.downstream_map()
        return [t for t in self.tasks if not down[t]]

    # ------------------------------------------------------------------ conf

    def resolve_conf(self, conf: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check a trigger's conf against the declared params; return conf with defaults filled.

        Raises ConfError listing every problem (unknown key, wrong type, out of range, missing
        value), its ``fields`` naming each refused param.
        """
        return params_mod.resolve(self.dag_id, self.params, conf, open_conf=self.open_conf)
