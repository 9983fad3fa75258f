"""`beatflow dags check` refuses a scheduled DAG whose scheduled runs could never start."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from beatflow.cli import main

SCHEDULED_NEEDS_CONF = """
from datetime import timedelta
from beatflow import DAG, Param, task

@task
def hello(customer: str) -> str:
    return customer

with DAG("needs_conf", schedule=timedelta(hours=1),
         params={"customer": Param(type=str, required=True)}):
    hello("x")

with DAG("manual_needs_conf", params={"customer": Param(type=str, required=True)}):
    hello("y")
"""


def test_dags_check_reports_a_scheduled_dag_with_a_required_param_without_default(
    tmp_path: Path,
) -> None:
    (tmp_path / "needs.py").write_text(SCHEDULED_NEEDS_CONF)
    env = {"BEATFLOW_DAGS_FOLDER": str(tmp_path)}
    result = CliRunner().invoke(main, ["dags", "check"], env=env)
    assert result.exit_code == 1, result.output
    assert "'needs_conf' is scheduled" in result.output
    assert "manual_needs_conf" not in result.output  # a manual DAG gets its conf when triggered
    result = CliRunner().invoke(main, ["dags", "check", "--json"], env=env)
    body = json.loads(result.stdout)
    assert body["ok"] is False
    assert len(body["schedule_errors"]) == 1
