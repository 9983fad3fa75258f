"""Airflow DAG files, unchanged, run by a real beatflow worker: TaskFlow results and
multiple_outputs, keyed xcom_push/xcom_pull, Jinja templates, BashOperator, retries, task groups,
Param and callbacks."""

from __future__ import annotations

import json

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
