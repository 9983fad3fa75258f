"""Airflow DAG files, unchanged, run by a real beatflow worker: TaskFlow results and
multiple_outputs, keyed xcom_push/xcom_pull, Jinja templates, BashOperator, retries, task groups,
Param (JSON-Schema formats and keywords) and callbacks, sensors, setup and teardown,
TriggerDagRunOperator and ExternalTaskSensor, expand over several arguments, pools and assets."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from beatflow.errors import ConfError
from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import Cluster
from tests.procs import wait_for


def test_taskflow_xcom_and_templates_run(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_basics", conf={"x": 10})
    assert run.state == "success", airflow_cluster.log_tail()
    assert tasks["extract"].result == {"a": 1, "b": 2}
    assert tasks["add"].result == {"__airflow_xcom__": {"k": 3}, "return_value": 13}
    ds = run.logical_date.strftime("%Y-%m-%d")
    assert tasks["say"].result == f"{ds} 10 3"
    assert tasks["end"].state == "success"


def test_branches_short_circuits_and_skips_end_skipped(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_branching", conf={"path": "right"})
    assert run.state == "success", airflow_cluster.log_tail()
    states = {k: t.state for k, t in tasks.items()}
    assert states == {
        "choose": "success",
        "go_left": "skipped",
        "go_right": "success",
        "join": "success",
        "worth_it": "success",
        "gated": "skipped",
        "open_gate": "success",
        "after_gate": "success",
        "skip_me": "skipped",
        "bash_skips": "skipped",
    }, states


def test_task_groups_params_and_callbacks_run(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_groups", conf={"n": 3})
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "failed", airflow_cluster.log_tail()
    assert states["start"] == "success" and states["work.double"] == "success", states
    assert tasks["work.double"].result == 6
    assert states["work.fail"] == "failed" and states.get("end", "upstream_failed") != "success"
    marks = airflow_cluster.tmp / "marks" / f"af-{run.run_id}.jsonl"

    def seen() -> list[list[object]]:
        lines = marks.read_text().splitlines() if marks.exists() else []
        return sorted((json.loads(line)[:2] for line in lines), key=str)

    wait_for(lambda: len(seen()) >= 2, timeout=30, message="the two failure callbacks")
    assert seen() == [["failure", "work.fail"], ["failure", None]]


def _pokes(cluster: Cluster, name: str, run_id: str) -> int:
    path = cluster.marks / f"af-{name}-{run_id}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_sensors_poke_on_the_native_sensors(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_sensors")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    # @task.sensor in reschedule mode: three pokes, each its own claim; its PokeReturnValue's
    # value is the result
    assert tasks["ready"].result == "ready after 3"
    assert _pokes(airflow_cluster, "ready", run.run_id) == 3
    assert tasks["use"].result == "ready after 3"
    # a BaseSensorOperator subclass in poke mode: done on its second poke, no value
    assert _pokes(airflow_cluster, "counted", run.run_id) == 2
    assert tasks["counted"].state == "success" and tasks["counted"].result is None
    # a PythonSensor past its timeout with soft_fail is skipped; a BashSensor exiting 0 is done
    assert states["never"] == "skipped" and states["bash"] == "success", states


def test_a_teardown_runs_after_a_failure_and_its_own_failure_is_not_the_runs(
    airflow_cluster: Cluster,
) -> None:
    run, tasks = airflow_cluster.run("af_teardown_after_failure")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "failed", states
    assert states == {"create": "success", "work": "failed", "delete": "success"}, states

    run, tasks = airflow_cluster.run("af_teardown_fails_quietly")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    assert states == {"make": "success", "middle": "success", "cleanup": "failed"}, states
    # the `with cleanup(make()):` block put middle between the setup and the teardown
    dag = runtime_of(airflow_cluster.app).dag("af_teardown_fails_quietly")
    assert dag.tasks["middle"].upstream == {"make"}
    assert "middle" in dag.tasks["cleanup"].upstream

    run, tasks = airflow_cluster.run("af_teardown_skipped")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", states
    assert states == {"nothing_to_make": "skipped", "nothing_to_clean": "skipped"}, states


def test_trigger_dag_run_starts_one_run_and_an_external_task_sensor_sees_it(
    airflow_cluster: Cluster,
) -> None:
    run, tasks = airflow_cluster.run("af_controller")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    targets = airflow_cluster.store.dag_runs_at("af_target", run.logical_date)
    assert [t.run_id for t in targets] == [f"triggered__af_controller.trigger__{run.run_id}"]
    (target,) = targets
    assert target.state == "success" and dict(target.conf) == {"n": 21}
    done = airflow_cluster.tasks("af_target", target.run_id)
    assert done["double"].result == 42
    pushed = tasks["trigger"].result["__airflow_xcom__"]
    assert pushed == {"trigger_run_id": target.run_id, "trigger_dag_id": "af_target"}


def test_mapping_over_several_arguments_pools_assets_far_pulls_and_conditions(
    airflow_cluster: Cluster,
) -> None:
    airflow_cluster.store.set_pool("af_pool", 1)
    run, tasks = airflow_cluster.run("af_mapping")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    # expand(x=[1, 2], y=[10, 20]): the cross product, four mapped runs
    assert sorted(t.result for k, t in tasks.items() if k.startswith("add[")) == [11, 12, 21, 22]
    assert tasks["total"].result == 66
    assert sorted(t.result for k, t in tasks.items() if k.startswith("add_kw[")) == [3, 7]
    # a mapped task group: each task of it maps, index by index, over the one before
    twice = [tasks[f"grouped.twice[{i}]"].result for i in range(3)]
    assert twice == [4, 6, 8], states
    # xcom_pull from a task that is not a direct upstream reads its stored result
    assert tasks["far"].result == [1, 2]
    # the pool is beatflow's pool; the outlet is beatflow's asset
    assert tasks["pooled"].result == "in the pool"
    events = airflow_cluster.store.list_asset_events("af://orders")
    assert [(e.dag_id, e.run_id, e.task_id) for e in events] == [
        ("af_mapping", run.run_id, "pooled")
    ]
    # @task.skip_if / @task.run_if: the condition, on the task's context, before it runs
    assert states["not_today"] == "skipped", states
    assert states["gated"] == "success" and tasks["gated"].result == "ran", states
    consumer = runtime_of(airflow_cluster.app).dag("af_on_orders")
    assert consumer.asset_schedule is not None
    assert consumer.asset_schedule.names() == {"af://orders"}


def test_params_with_formats_and_keywords_refuse_a_bad_conf_and_run_a_good_one(
    airflow_cluster: Cluster,
) -> None:
    runtime = runtime_of(airflow_cluster.app)
    bad = {"day": "2024-02-30", "owner": "nobody", "label": "abc", "sizes": [1, "2"], "x": 1}
    with pytest.raises(ConfError) as info:
        trigger_dag(runtime, "af_params", conf=bad)
    assert info.value.fields == {
        "day": "must be in the date format, got '2024-02-30'",
        "owner": "must be in the email format, got 'nobody'",
        "label": "must fit the JSON Schema keyword minLength=5: 'abc' is too short",
        "sizes": "must fit the JSON Schema keyword type='integer' at $[1]: '2' is not of type"
        " 'integer'",
    }
    with pytest.raises(ConfError, match='"label" is required'):
        trigger_dag(runtime, "af_params")
    assert airflow_cluster.store.list_dag_runs("af_params") == []  # a refused trigger leaves none
    good = {"day": "2024-02-29", "label": "leap day", "sizes": [3], "note": None, "x": 1}
    run, tasks = airflow_cluster.run("af_params", conf=good)
    assert run.state == "success", airflow_cluster.log_tail()
    seen = tasks["show"].result
    defaults = {"at": "2024-01-10T12:00:00+00:00", "owner": "data@example.org"}
    assert {k: seen["params"][k] for k in [*good, *defaults]} == {**good, **defaults}, seen
    assert {k: seen["conf"][k] for k in good} == good, seen  # nothing of the conf is lost


def test_external_python_runs_in_another_interpreter_with_json_in_and_out(
    airflow_cluster: Cluster,
) -> None:
    run, tasks = airflow_cluster.run("af_external")
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    python = os.path.join(sys.base_prefix, "bin", "python3")
    ds = run.logical_date.strftime("%Y-%m-%d")
    # op_args rendered ("3"), op_kwargs, and the context entries the function names
    assert tasks["ext"].result == {
        "executable": python,
        "celery": False,  # not the worker's Python
        "sum": "3!",
        "ds": ds,
        "n": 3,
    }
    # an upstream result in, the JSON-able context for **kwargs (no ti), a result out
    assert tasks["shout"].result == {"items": ["A", "B"], "run_id": run.run_id, "ti": False}
    assert states["pick"] == "success" and tasks["pick"].result == ["left"]
    assert states["left"] == "success" and states["right"] == "skipped", states


def test_external_python_says_why_it_cannot_run(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_external_errors")
    assert run.state == "failed", airflow_cluster.log_tail()
    errors = {k: t.error or "" for k, t in tasks.items()}
    assert {k: t.state for k, t in tasks.items()} == dict.fromkeys(errors, "failed")
    assert "'/nonexistent/bin/python3' does not exist" in errors["missing"], errors
    assert "the value not_json() returned is not JSON" in errors["not_json"], errors
    assert "ValueError: no such thing" in errors["raises"], errors
    assert "op_args[0] cannot go to another Python interpreter" in errors["given"], errors


def _write_wheel(folder: Path, name: str, version: str, module: str) -> None:
    """A pure-Python wheel of one module, for pip to install from a folder."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{path},sha256={digest.decode()},{len(text.encode())}\n"
    files[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def test_virtualenv_tasks_run_in_environments_made_for_them(airflow_cluster: Cluster) -> None:
    _write_wheel(airflow_cluster.marks / "wheels", "beatflow_test_colours", "1.0", "VERSION = 1\n")
    run, tasks = airflow_cluster.run("af_virtualenv", timeout=300)
    states = {k: t.state for k, t in tasks.items()}
    assert run.state == "success", (states, airflow_cluster.log_tail())
    bare = tasks["bare"].result
    assert bare["n"] == 2 and bare["celery"] is False  # system_site_packages=False: bare
    assert bare["prefix"] != sys.prefix and "beatflow-venv-" in bare["prefix"]
    assert tasks["with_colours"].result == {"word": "hi", "colours": 1}
    assert tasks["pick"].result == ["chosen"], states
    assert states["chosen"] == "success" and states["other"] == "skipped", states
    # the same requirements in the same cache: one environment, built once, for both tasks
    built = sorted(p.name for p in (airflow_cluster.marks / "venvs").glob("beatflow-venv-*"))
    assert len([b for b in built if not b.endswith(".lock")]) == 1, built


def test_a_requirement_pip_refuses_fails_the_task_saying_so(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_virtualenv_errors", timeout=120)
    assert run.state == "failed", airflow_cluster.log_tail()
    error = tasks["refused"].error or ""
    assert "pip install colorama === not a version failed" in error, error


def test_async_callables_are_awaited(airflow_cluster: Cluster) -> None:
    run, tasks = airflow_cluster.run("af_async")
    assert run.state == "success", airflow_cluster.log_tail()
    assert tasks["napped"].result == "slept 0.01" and tasks["awaited"].result == 42
