"""Task groups: ``with TaskGroup("extract"):`` and the ``@task_group`` decorator. A group prefixes
the ids of the tasks made inside it (``extract.load``; nested: ``etl.extract.load``), merges its
``default_args`` over the DAG's (and an outer group's), and stands for its roots and leaves in
dependencies (``extract >> load``, ``start >> extract``). Groups are only a way of writing and
drawing: the DAG's tasks and edges are what runs, and the web UI folds a group into one node."""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from beatflow.dag import model
from beatflow.errors import DagDefinitionError

__all__ = ["GroupSpec", "TaskGroup", "task_group"]

_GROUP_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")

_current_group: contextvars.ContextVar[TaskGroup | None] = contextvars.ContextVar(
    "beatflow_current_group", default=None
)


@dataclass(slots=True)
class GroupSpec:
    """What a DAG keeps of a group (``dag.groups[group_id]``): its place in the tree of groups
    and the tasks made directly inside it."""

    group_id: str  # prefixed by its parents': "etl.extract"
    label: str  # its own id: "extract"
    parent: str | None = None
    tooltip: str = ""
    tasks: list[str] = field(default_factory=list)
    file: str | None = None
    line: int | None = None


def _authoring() -> Any:
    from beatflow.dag import authoring  # authoring imports this module: a late import

    return authoring


class TaskGroup:
    """A group of tasks inside a DAG: ``with TaskGroup("extract", default_args={...}) as g:``."""

    def __init__(
        self,
        group_id: str,
        *,
        default_args: Mapping[str, Any] | None = None,
        tooltip: str = "",
    ) -> None:
        authoring = _authoring()
        file, line = authoring._caller()
        dag: model.DAG | None = authoring._current_dag.get()
        if dag is None:
            raise DagDefinitionError(
                f'TaskGroup("{group_id}") must be made inside a DAG block (with DAG(...):)',
                file=file,
                line=line,
            )
        if not isinstance(group_id, str) or not _GROUP_ID_RE.fullmatch(group_id):
            raise DagDefinitionError(
                f'DAG "{dag.dag_id}": invalid group id {group_id!r}: use ASCII letters, digits, '
                "'_' and '-'",
                file=file,
                line=line,
            )
        parent = current(dag)
        full = qualify(parent, group_id)
        if full in dag.groups:
            first = dag.groups[full]
            raise DagDefinitionError(
                f'duplicate task group "{full}" in DAG "{dag.dag_id}" (first defined at '
                f"{first.file}:{first.line})",
                file=file,
                line=line,
            )
        own = dict(default_args or {})
        unknown = set(own) - authoring._TASK_OPTIONS
        if unknown:
            raise DagDefinitionError(
                f'task group "{full}" of DAG "{dag.dag_id}": unknown default_args '
                f"{sorted(unknown)}; known: {sorted(authoring._TASK_OPTIONS)}",
                file=file,
                line=line,
            )
        self.dag = dag
        self.group_id = full
        self.parent = parent
        self.defaults: dict[str, Any] = {**(parent.defaults if parent else {}), **own}
        dag.groups[full] = GroupSpec(
            full, group_id, parent.group_id if parent else None, tooltip, [], file, line
        )
        self._tokens: list[contextvars.Token[TaskGroup | None]] = []

    def __repr__(self) -> str:
        return f"TaskGroup({self.group_id!r})"

    def __enter__(self) -> TaskGroup:
        self._tokens.append(_current_group.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tokens:
            _current_group.reset(self._tokens.pop())

    # ------------------------------------------------------------------ members

    @property
    def task_ids(self) -> list[str]:
        """Every task of the group and of its nested groups, in definition order."""
        return members(self.dag, self.group_id)

    def roots(self) -> list[str]:
        """The group's tasks with no upstream inside the group: what ``x >> group`` points to."""
        inside = set(self.task_ids)
        return [t for t in self.task_ids if not self.dag.tasks[t].upstream & inside]

    def leaves(self) -> list[str]:
        """The group's tasks with no downstream inside the group: what ``group >> x`` waits for."""
        inside = self.task_ids
        ups = set().union(*(self.dag.tasks[t].upstream for t in inside)) if inside else set()
        return [t for t in inside if t not in ups]

    # ------------------------------------------------------------------ edges

    def __rshift__(self, other: Any) -> Any:
        link(self.dag, tails(self), heads(other))
        return other

    def __rrshift__(self, other: Any) -> TaskGroup:
        link(self.dag, tails(other), heads(self))
        return self

    def __lshift__(self, other: Any) -> Any:
        link(self.dag, tails(other), heads(self))
        return other

    def __rlshift__(self, other: Any) -> TaskGroup:
        link(self.dag, tails(self), heads(other))
        return self


def current(dag: model.DAG) -> TaskGroup | None:
    """The group open in ``dag`` where a task is being made, if any."""
    group = _current_group.get()
    return group if group is not None and group.dag is dag else None


def qualify(group: TaskGroup | None, name: str) -> str:
    """A task's or group's id inside ``group``: ``extract.load``."""
    return name if group is None else f"{group.group_id}.{name}"


def task_defaults(dag: model.DAG) -> dict[str, Any]:
    """The default_args a task made now takes: the DAG's, then each open group's over them."""
    group = current(dag)
    return {**dag.defaults, **(group.defaults if group else {})}


def add_member(dag: model.DAG, task_id: str) -> None:
    """Record that ``task_id`` was made inside the open group (if any)."""
    group = current(dag)
    if group is not None:
        dag.groups[group.group_id].tasks.append(task_id)


def members(dag: model.DAG, group_id: str) -> list[str]:
    """The tasks of ``group_id`` and its nested groups, in the DAG's definition order."""
    inside = {group_id}
    for gid, spec in dag.groups.items():  # parents are defined before their children
        if spec.parent in inside:
            inside.add(gid)
    ids = {t for gid in inside for t in dag.groups[gid].tasks}
    return [t for t in dag.tasks if t in ids]


def group_of(dag: model.DAG) -> dict[str, str]:
    """task_id -> the innermost group it belongs to (tasks outside every group are absent)."""
    return {t: gid for gid, spec in dag.groups.items() for t in spec.tasks}


def ancestry(dag: model.DAG, group_id: str | None) -> list[str]:
    """``group_id`` and its parents, outermost first: ``["etl", "etl.extract"]``."""
    chain: list[str] = []
    while group_id is not None:
        chain.append(group_id)
        group_id = dag.groups[group_id].parent
    return chain[::-1]


# ---------------------------------------------------------------------- dependencies


def heads(value: Any) -> list[str]:
    """The task ids an edge *into* ``value`` points to (a task, a group's roots, a list)."""
    return _ends(value, "roots")


def tails(value: Any) -> list[str]:
    """The task ids an edge *out of* ``value`` starts from (a task, a group's leaves, a list)."""
    return _ends(value, "leaves")


def _ends(value: Any, which: str) -> list[str]:
    if isinstance(value, TaskGroup):
        return list(getattr(value, which)())
    if isinstance(value, list | tuple):
        return [t for v in value for t in _ends(v, which)]
    task_id = getattr(value, "task_id", None)
    if isinstance(task_id, str) and hasattr(value, "dag"):
        return [task_id]
    raise TypeError(
        f"a dependency (>> or <<) needs tasks, task groups or lists of them, "
        f"got {type(value).__name__}"
    )


def link(dag: model.DAG, upstream: Iterable[str], downstream: Iterable[str]) -> None:
    """Order-only edges from every task of ``upstream`` to every task of ``downstream``."""
    ups = list(upstream)
    for down in downstream:
        dag.tasks[down].order_upstream.update(u for u in ups if u != down)


# ---------------------------------------------------------------------- decorator


@overload
def task_group(
    fn: Callable[..., Any],
    /,
    *,
    group_id: str | None = None,
    default_args: Mapping[str, Any] | None = None,
    tooltip: str = "",
) -> Callable[..., Any]: ...
@overload
def task_group(
    fn: None = None,
    /,
    *,
    group_id: str | None = None,
    default_args: Mapping[str, Any] | None = None,
    tooltip: str = "",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def task_group(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    group_id: str | None = None,
    default_args: Mapping[str, Any] | None = None,
    tooltip: str = "",
) -> Any:
    """Make a function a task group: calling it inside a DAG makes its tasks inside a group
    named after it (``@task_group`` or ``@task_group(group_id=..., default_args=...)``). The call
    returns what the function returns when that is a task's result (so data flows on), else the
    group (so ``extract() >> load()`` orders on the group's leaves)."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def call(*args: Any, **kwargs: Any) -> Any:
            dag = _authoring()._current_dag.get()
            if dag is None:
                return f(*args, **kwargs)
            gid = group_id or f.__name__
            parent = current(dag)
            base, n = gid, 1
            while qualify(parent, gid) in dag.groups:  # called again: extract__1, extract__2
                gid, n = f"{base}__{n}", n + 1
            doc = (f.__doc__ or "").strip().splitlines()
            with TaskGroup(
                gid, default_args=default_args, tooltip=tooltip or (doc[0] if doc else "")
            ) as group:
                result = f(*args, **kwargs)
            return result if is_task_result(result) else group

        def override(**options: Any) -> Callable[..., Any]:
            """The same group with another ``group_id``, ``default_args`` or ``tooltip``."""
            known = {"group_id": group_id, "default_args": default_args, "tooltip": tooltip}
            unknown = set(options) - set(known)
            if unknown:
                raise TypeError(f"override() takes {', '.join(known)}; got {sorted(unknown)}")
            return task_group(f, **{**known, **options})

        call.override = override  # type: ignore[attr-defined]
        return call

    return wrap(fn) if fn is not None else wrap


def is_task_result(value: Any) -> bool:
    """Whether ``value`` is a task's result (what a task-group function may return)."""
    return isinstance(getattr(value, "task_id", None), str) and hasattr(value, "dag")


def tree_order(dag: model.DAG, order: Iterable[str]) -> list[tuple[str, str, int]]:
    """``order`` (task ids) regrouped so each group's tasks are together, headed by the group:
    rows of ("group" | "task", id, depth). A group sits where its first task would."""
    order = list(order)
    owner = group_of(dag)

    def chain(task_id: str) -> list[str]:
        return ancestry(dag, owner.get(task_id))

    rows: list[tuple[str, str, int]] = []

    def emit(prefix: list[str], ids: list[str]) -> None:
        depth = len(prefix)
        done: set[str] = set()
        for tid in ids:
            path = chain(tid)
            if len(path) == depth:
                rows.append(("task", tid, depth))
                continue
            child = path[depth]
            if child in done:
                continue
            done.add(child)
            rows.append(("group", child, depth))
            emit([*prefix, child], [t for t in ids if chain(t)[depth : depth + 1] == [child]])

    emit([], order)
    return rows
