"""Property tests of the authoring API and the trigger conf validator: whatever a user writes or
sends, the answer is a DAG that holds together or a DagDefinitionError / ConfError saying what
is wrong, never another exception, and never an error message that carries a whole payload."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beatflow.dag.authoring import DAG, Param, task
from beatflow.dag.model import TRIGGER_RULES
from beatflow.errors import ConfError, DagDefinitionError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip

PARAMS = {
    "count": Param(default=1, type=int),
    "name": Param(type=str, required=True),
    "ratio": Param(default=0.5, type=float),
    "tags": Param(default=[], type=list),
    "anything": Param(default=None),
}


def conf_dag() -> Any:
    @task
    def step(ctx: Any) -> None:
        pass

    with DAG("props_conf", params=PARAMS) as dag:
        step()
    return dag


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, st.dictionaries(st.sampled_from([*PARAMS, "nme", "x"]), JSON, max_size=6)))
def test_any_conf_resolves_to_the_declared_params_or_is_a_conf_error(conf: Any) -> None:
    dag = conf_dag()
    model = getattr(dag, "model", dag)
    try:
        resolved = model.resolve_conf(conf)
    except ConfError as exc:
        assert exc.problems and str(exc).startswith('bad conf for DAG "props_conf"')
        assert len(str(exc)) < 300 * len(exc.problems) + 100  # no payload copied whole
        return
    assert isinstance(conf, dict | type(None))
    assert set(resolved) == set(PARAMS)
    assert isinstance(resolved["name"], str)
    assert isinstance(resolved["count"], int) and not isinstance(resolved["count"], bool)
    assert isinstance(resolved["ratio"], float | int)
    for key, value in (conf or {}).items():
        assert resolved[key] == value


def test_a_huge_conf_value_is_refused_without_copying_it_into_the_error() -> None:
    model = getattr(conf_dag(), "model", conf_dag())
    try:
        model.resolve_conf({"name": "n", "count": "9" * 1_000_000})
    except ConfError as exc:
        assert len(str(exc)) < 1_000
    else:
        raise AssertionError("a string for an int param was accepted")


OPTION_VALUES = {
    "retries": st.one_of(st.integers(-3, 5), st.text(max_size=3), st.none()),
    "retry_delay": st.one_of(st.floats(-5, 5, allow_nan=False), st.text(max_size=3)),
    "trigger_rule": st.one_of(st.sampled_from(sorted(TRIGGER_RULES)), st.text(max_size=8)),
    "priority": st.one_of(st.integers(-2, 12), st.text(max_size=2)),
    "queue": st.one_of(st.text(max_size=8), st.none()),
}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 8),
    edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=16),
    options=st.dictionaries(st.sampled_from(sorted(OPTION_VALUES)), st.none(), max_size=3),
    data=st.data(),
    schedule=st.one_of(
        st.none(),
        st.sampled_from(["@daily", "*/5 * * * *", "0 25 * * *", "bogus", "* * * *"]),
        st.builds(timedelta, seconds=st.integers(-5, 100)),
    ),
    max_active=st.integers(-1, 3),
)
def test_any_dag_written_with_the_authoring_api_holds_together_or_is_a_definition_error(
    n: int,
    edges: list[tuple[int, int]],
    options: dict[str, None],
    data: st.DataObject,
    schedule: Any,
    max_active: int,
) -> None:
    opts = {k: data.draw(OPTION_VALUES[k]) for k in options}
    try:
        step = task(**opts)(lambda *a: None)
        with DAG("props_dag", schedule=schedule, max_active_runs=max_active) as dag:
            refs = [step.override(task_id=f"t{i}")() for i in range(n)]
            for a, b in edges:
                if a < n and b < n:
                    refs[a] >> refs[b]
        model = getattr(dag, "model", dag)
        order = model.topological_order() if hasattr(model, "topological_order") else None
    except DagDefinitionError as exc:
        assert str(exc)  # says what is wrong
        return
    tasks = model.tasks
    assert set(tasks) == {f"t{i}" for i in range(n)}
    for spec in tasks.values():
        assert spec.upstream <= set(tasks) and spec.task_id not in spec.upstream
    if order is not None:
        position = {t: i for i, t in enumerate(order)}
        for spec in tasks.values():
            assert all(position[u] < position[spec.task_id] for u in spec.upstream)
