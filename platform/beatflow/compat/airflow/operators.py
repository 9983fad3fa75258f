"""Airflow operators as beatflow tasks: ``BaseOperator`` (and subclasses with ``execute(context)``),
``EmptyOperator``, ``PythonOperator``, ``BashOperator``, the XComArg an operator's result is,
``.partial()`` / ``.expand()`` onto beatflow's ``.map()``. Each operator is one TaskSpec whose
function renders the operator's templated fields and calls ``execute`` (see ``running``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self

from beatflow.compat.airflow import assets as airflow_assets
from beatflow.compat.airflow import groups as airflow_groups
from beatflow.compat.airflow import running, setup_teardown
from beatflow.compat.airflow.dag import DAG, caller, current_dag, link
from beatflow.compat.airflow.finder import unsupported
from beatflow.dag import groups
from beatflow.dag.assets import Asset
from beatflow.dag.model import CALLBACK_EVENTS, TRIGGER_RULES, RetryPolicy, TaskSpec, map_leaves
from beatflow.dag.task_options import option_problems
from beatflow.errors import DagDefinitionError, InvalidIdError
from beatflow.ids import check_task_id

_IGNORED = {
    "owner",
    "email",
    "email_on_failure",
    "email_on_retry",
    "depends_on_past",
    "wait_for_downstream",
    "priority_weight",
    "weight_rule",
    "doc",
    "doc_md",
    "doc_rst",
    "doc_json",
    "doc_yaml",
    "task_display_name",
    "ui_color",
    "ui_fgcolor",
    "executor_config",
    "run_as_user",
    "start_date",
    "end_date",
    "sla",
    "max_active_tis_per_dag",
    "max_active_tis_per_dagrun",
    "map_index_template",
    "inlets",
}
_CALLBACKS = (
    "on_execute_callback",
    "on_success_callback",
    "on_failure_callback",
    "on_retry_callback",
    "on_skipped_callback",
)


class _Linked:
    """``a >> b``, ``a << b`` and their reflections (a list on the left) as Airflow writes
    them, for operators and their outputs alike: each records an edge with ``link``."""

    def __rshift__(self, other: Any) -> Any:
        link(self, other)
        return other

    def __lshift__(self, other: Any) -> Any:
        link(other, self)
        return other

    def __rrshift__(self, other: Any) -> Self:
        link(other, self)
        return self

    def __rlshift__(self, other: Any) -> Self:
        link(self, other)
        return self


class XComArg(_Linked):
    """An operator's result as an input of another (``task_a()`` passed to ``task_b``), or one
    key of it (``result["key"]``)."""

    def __init__(self, operator: BaseOperator, key: str = "return_value") -> None:
        self.operator = operator
        self.key = key

    def __getitem__(self, key: str) -> XComArg:
        return XComArg(self.operator, key)

    @property
    def output(self) -> XComArg:
        return self

    def __iter__(self) -> Any:
        raise unsupported("iterating over an XComArg")

    def map(self, fn: Callable[..., Any]) -> Any:
        raise unsupported("XComArg.map()")

    def zip(self, *others: Any, **kw: Any) -> Any:
        raise unsupported("XComArg.zip()")

    def __repr__(self) -> str:
        return f"XComArg({self.operator.task_id!r}, {self.key!r})"

    def __str__(self) -> str:
        """In a templated string (an f-string in the DAG file), the pull as Airflow writes it."""
        op = self.operator
        return (
            f"{{{{ task_instance.xcom_pull(task_ids='{op.task_id}', dag_id='{op.dag_id}', "
            f"key='{self.key}') }}}}"
        )

    def as_setup(self) -> XComArg:
        self.operator.as_setup()
        return self

    def as_teardown(self, setups: Any = None, on_failure_fail_dagrun: bool | None = None) -> Any:
        self.operator.as_teardown(setups=setups, on_failure_fail_dagrun=on_failure_fail_dagrun)
        return self

    def __enter__(self) -> Any:
        return self.operator.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.operator.__exit__(*exc)


def _pool(name: Any) -> str | None:
    """Airflow's pool on beatflow's (``beatflow pools``); ``default_pool`` is no pool: beatflow
    limits only the pools it is told of."""
    if name in (None, "default_pool"):
        return None
    problems = option_problems({"pool": name})
    if problems:
        raise DagDefinitionError("; ".join(problems))
    return str(name)


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _checked_options(
    cls: str, given: Mapping[str, Any], d: Mapping[str, Any], trigger_rule: Any
) -> str:
    """Refuse the operator arguments the layer lacks (naming them); the trigger rule to use."""
    explicit = dict(given)
    if explicit.get("on_execute_callback", d.get("on_execute_callback")) is not None:
        raise unsupported("on_execute_callback", "callbacks before a task runs")
    for name in _CALLBACKS:
        explicit.pop(name, None)
    for key in explicit:
        if key not in _IGNORED and key != "outlets":
            raise unsupported(f"{cls}({key}=...)")
    if any(isinstance(i, Asset) for i in explicit.get("inlets") or ()):
        raise unsupported("inlets of assets", "inlet_events and asset_state in the context")
    rule = str(getattr(trigger_rule, "value", trigger_rule))
    if trigger_rule == "all_success" and "trigger_rule" in d:
        rule = str(getattr(d["trigger_rule"], "value", d["trigger_rule"]))
    if rule not in TRIGGER_RULES:
        raise unsupported(f"trigger rule {rule!r}", "not supported yet")
    return rule


class BaseOperator(_Linked):
    """``airflow.models.BaseOperator``: subclass it and write ``execute(self, context)``."""

    template_fields: Sequence[str] = ()
    template_ext: Sequence[str] = ()
    template_fields_renderers: Mapping[str, str] = {}
    ui_color = "#fff"
    multiple_outputs = False
    is_setup = False
    is_teardown = False
    # @task.run_if / @task.skip_if: (kind, condition(context), skip message), checked first
    conditions: tuple[tuple[str, Callable[..., Any], str | None], ...] = ()
    control: str | None = None  # a branch or short-circuit: its result decides (dag/flow.py)

    def __init__(
        self,
        *,
        task_id: str,
        dag: DAG | None = None,
        trigger_rule: str = "all_success",
        retries: int | None = None,
        retry_delay: timedelta | float | None = None,
        retry_exponential_backoff: bool | None = None,
        max_retry_delay: timedelta | float | None = None,
        execution_timeout: timedelta | None = None,
        queue: str | None = None,
        pool: str | None = None,
        pool_slots: int = 1,
        do_xcom_push: bool = True,
        multiple_outputs: bool | None = None,
        params: Mapping[str, Any] | None = None,
        default_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        file, line = caller()
        owner = dag or current_dag.get()
        if owner is None:
            raise DagDefinitionError(
                f'operator "{task_id}" is made outside a DAG: use `with DAG(...)` or dag=',
                file=file,
                line=line,
            )
        group = airflow_groups.open_group(owner)
        outer = group.airflow_defaults if group is not None else {}
        d = {**owner.airflow_defaults, **outer, **(default_args or {})}
        rule = _checked_options(type(self).__name__, kwargs, d, trigger_rule)
        task_id = groups.qualify(groups.current(owner.model), task_id)  # extract.load
        callbacks = {}  # Airflow's on_<event>_callback, given or from default_args
        for event in CALLBACK_EVENTS:
            name = f"on_{event}_callback"
            callbacks[event] = airflow_groups.callbacks(kwargs.get(name, d.get(name)))
        try:
            check_task_id(task_id)
        except InvalidIdError as exc:
            raise DagDefinitionError(f'DAG "{owner.dag_id}": {exc}', file=file, line=line) from None

        def pick(name: str, given: Any) -> Any:
            return d.get(name) if given is None else given

        delay = pick("retry_delay", retry_delay)
        timeout = pick("execution_timeout", execution_timeout)
        exponential = bool(pick("retry_exponential_backoff", retry_exponential_backoff))
        self.task_id = task_id
        self.dag = owner
        self._trigger_rule = rule
        self.retries = int(pick("retries", retries) or 0)
        self.do_xcom_push = do_xcom_push
        if multiple_outputs is not None:
            self.multiple_outputs = multiple_outputs
        self.params = {k: airflow_groups.param_value(v) for k, v in (params or {}).items()}
        self.expanded: str | None = None
        self.spec = TaskSpec(
            task_id=task_id,
            fn=running.Runner(self),
            retry=RetryPolicy(
                retries=self.retries,
                delay=_seconds(delay) if delay is not None else 300.0,
                backoff=2.0 if exponential else 1.0,
                max_delay=_seconds(pick("max_retry_delay", max_retry_delay) or 86400.0),
                jitter=exponential,
            ),
            time_limit=None if timeout is None else _seconds(timeout),
            queue=pick("queue", queue),
            outlets=airflow_assets.outlets_of(kwargs.get("outlets", d.get("outlets"))),
            pool=_pool(pick("pool", pool)),
            pool_slots=int(pick("pool_slots", pool_slots if pool_slots != 1 else None) or 1),
            trigger_rule=rule,
            control=self.control,
            callbacks={e: tuple(fns) for e, fns in callbacks.items() if fns},
            file=file,
            line=line,
        )
        owner.model.add_task(self.spec)
        groups.add_member(owner.model, task_id)
        owner.operators[task_id] = self

    # ---------------------------------------------------------------- authoring

    @property
    def trigger_rule(self) -> str:
        return self._trigger_rule

    @trigger_rule.setter
    def trigger_rule(self, value: Any) -> None:
        """``op.trigger_rule = TriggerRule.NONE_FAILED`` after the operator is made."""
        rule = str(getattr(value, "value", value))
        if rule not in TRIGGER_RULES:
            raise unsupported(f"trigger rule {rule!r}", "not supported yet")
        self._trigger_rule = rule
        if hasattr(self, "spec"):
            self.spec.trigger_rule = rule

    def as_setup(self) -> Self:
        """``op.as_setup()``: a setup task (see ``setup_teardown``)."""
        setup_teardown.mark_setup(self)
        return self

    def as_teardown(self, setups: Any = None, on_failure_fail_dagrun: bool | None = None) -> Self:
        """``op.as_teardown(setups=...)``: runs whatever its upstream's end; its failure is
        not the run's unless ``on_failure_fail_dagrun``."""
        setup_teardown.mark_teardown(self, setups, on_failure_fail_dagrun)
        return self

    def __enter__(self) -> Self:
        if not self.is_teardown:
            raise unsupported("`with` on a task that is not a teardown")
        self._block = setup_teardown.Block(self)
        self._block.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        block = self.__dict__.pop("_block", None)
        if block is not None:
            block.__exit__(*exc)

    @classmethod
    def partial(cls, **fixed: Any) -> Any:
        from beatflow.compat.airflow.mapping import Partial

        return Partial(cls, fixed)

    @property
    def output(self) -> XComArg:
        return XComArg(self)

    @property
    def dag_id(self) -> str:
        return self.dag.dag_id

    def set_downstream(self, other: Any) -> None:
        link(self, other)

    def set_upstream(self, other: Any) -> None:
        link(other, self)

    def xcom_inputs(self) -> set[str]:
        """Task ids of the XComArgs among this operator's attributes (implicit upstream)."""
        found: set[str] = set()

        def note(leaf: Any) -> Any:
            if isinstance(leaf, XComArg):
                found.add(leaf.operator.task_id)
            return leaf

        for name, value in vars(self).items():
            if name not in ("dag", "spec"):
                map_leaves(value, note)
        found.discard(self.task_id)
        return found

    # ---------------------------------------------------------------- running

    def execute(self, context: Mapping[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define execute(context)")

    def render_template(self, content: Any, context: Mapping[str, Any]) -> Any:
        return running.render(content, context)
