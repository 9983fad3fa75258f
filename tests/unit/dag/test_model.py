"""The DAG model and authoring API: edges, ids, validation, conf, retry delays."""

from __future__ import annotations

from datetime import timedelta

import pytest

from beatflow import DAG, task
from beatflow.dag.model import Param, RetryPolicy
from beatflow.errors import ConfError, DagDefinitionError


@task
def a() -> int:
    return 1


@task
def b(x: int) -> int:
    return x + 1


def test_passing_a_result_makes_a_data_edge_and_shift_makes_an_order_edge():
    with DAG("d") as dag:
        x = a()
        y = b(x)
        z = a.override(task_id="z")()
        y >> z
    m = dag.model
    assert m.tasks["b"].data_upstream == {"a"}
    assert m.tasks["z"].upstream == {"b"}
    assert m.topological_order() == ["a", "b", "z"]


def test_lists_on_either_side_of_shift_fan_in_and_fan_out():
    with DAG("d") as dag:
        first, second, last = a(), a(), a()
        [first, second] >> last
        first >> [second]
    assert dag.model.tasks["a__2"].upstream == {"a", "a__1"}
    assert dag.model.tasks["a__1"].upstream == {"a"}


def test_the_same_function_used_twice_gets_distinct_ids():
    with DAG("d") as dag:
        a(), a(), a.override(task_id="custom")()
    assert list(dag.model.tasks) == ["a", "a__1", "custom"]


def test_calling_a_task_outside_a_dag_runs_the_function():
    assert b(41) == 42


def test_a_duplicate_task_id_is_reported_with_both_places():
    with (
        pytest.raises(DagDefinitionError, match='duplicate task id "x".*first defined at'),
        DAG("d"),
    ):
        a.override(task_id="x")()
        a.override(task_id="x")()


def test_a_cycle_is_named_with_its_path():
    with DAG("d") as dag:
        x, y, z = a.override(task_id="x")(), a.override(task_id="y")(), a.override(task_id="z")()
        x >> y >> z >> x
    with pytest.raises(DagDefinitionError, match=r"cycle: x -> y -> z -> x"):
        dag.model.validate()


def test_an_unknown_dependency_suggests_the_closest_name():
    with DAG("d") as dag:
        a.override(task_id="extract")()
        load = a.override(task_id="load")()
    dag.model.tasks["load"].order_upstream.add("extrct")
    with pytest.raises(DagDefinitionError) as err:
        dag.model.validate()
    assert 'depends on unknown task "extrct"; did you mean "extract"?' in str(err.value)
    assert err.value.file and err.value.file.endswith("test_model.py") and err.value.line
    assert load.task_id == "load"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"schedule": "61 * * * *"}, "invalid cron expression"),
        ({"schedule": "@sometimes"}, "unknown preset"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"max_active_runs": 0}, "max_active_runs"),
        ({"default_args": {"retires": 3}}, "unknown default_args"),
    ],
)
def test_bad_dag_options_are_refused_where_they_are_written(kwargs, message):
    with pytest.raises(DagDefinitionError, match=message) as err:
        DAG("d", **kwargs)
    assert err.value.file and err.value.file.endswith("test_model.py")


def test_unknown_task_options_and_trigger_rules_are_refused():
    with pytest.raises(DagDefinitionError, match="unknown @task options"):
        task(retires=3)(lambda: 1)
    with pytest.raises(DagDefinitionError, match="unknown trigger_rule"):
        task(trigger_rule="sometimes")(lambda: 1)


def test_default_args_apply_to_tasks_and_task_options_win():
    with DAG("d", default_args={"retries": 4, "queue": "io"}) as dag:
        a()
        a.override(task_id="x", retries=1)()
    assert dag.model.tasks["a"].retry.retries == 4
    assert dag.model.tasks["a"].queue == "io"
    assert dag.model.tasks["x"].retry.retries == 1


def test_conf_is_checked_against_params_and_defaults_filled():
    with DAG(
        "d",
        params={
            "limit": 10,
            "name": Param(type=str, required=True),
            "ratio": Param(default=0.5, type=float),
        },
    ) as dag:
        a()
    assert dag.model.resolve_conf({"name": "x", "ratio": 1}) == {
        "limit": 10,
        "name": "x",
        "ratio": 1,
    }
    with pytest.raises(ConfError) as err:
        dag.model.resolve_conf({"limt": 5, "limit": "many", "ratio": True})
    problems = err.value.problems
    assert any('unknown key "limt"' in p and 'did you mean "limit"' in p for p in problems)
    assert any('"limit" must be int' in p for p in problems)
    assert any('"ratio" must be float' in p for p in problems)
    assert any('"name" is required' in p for p in problems)


def test_retry_delay_grows_exponentially_up_to_the_cap_with_jitter_in_the_upper_half():
    policy = RetryPolicy(retries=5, delay=1.0, backoff=2.0, max_delay=5.0, jitter=True)
    assert [policy.delay_for(n, 1.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay_for(3, 0.0) == 2.0
    assert RetryPolicy(delay=timedelta(seconds=3).total_seconds(), jitter=False).delay_for(1) == 3.0


def test_map_outside_a_dag_maps_the_plain_function():
    assert b.map([1, 2]) == [2, 3]


def test_map_needs_a_task_result():
    with (
        pytest.raises(DagDefinitionError, match=r"\.map\(\) takes the result of another task"),
        DAG("d"),
    ):
        b.map([1, 2, 3])
