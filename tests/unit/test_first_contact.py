"""First contact: a misspelt BEATFLOW_* variable is reported with a did-you-mean, a cron error
names the bad field, `runs list UNKNOWN` says the DAG is unknown, and the commands scripts call
(`dags pause/unpause`, `db current/upgrade/prune`) print JSON with --json."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.dag.schedule import Schedule
from beatflow.settings import Settings


def test_a_misspelt_variable_is_reported_with_a_did_you_mean(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="beatflow.settings"):
        settings = Settings.from_env({"BEATFLOW_VISIBLITY_TIMEOUT": "7200"})
    assert settings.visibility_timeout == 3600  # ignored...
    assert (
        "BEATFLOW_VISIBLITY_TIMEOUT is not a beatflow setting and is ignored; did you mean "
        '"BEATFLOW_VISIBILITY_TIMEOUT"?' in caplog.text  # ...but said so
    )


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("0 25 * * *", "hour field 25 out of range 0-23"),
        ("61 * * * *", "minute field 61 out of range 0-59"),
        ("0 0 * 13 *", "month field 13 out of range 1-12"),
        ("0 0 * *", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("0 x * * *", "hour field 'x' is not valid"),
    ],
)
def test_a_cron_error_names_the_bad_field(cron: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        Schedule.parse(cron, ZoneInfo("UTC"))
    assert says in str(info.value)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "etl.py").write_text(
        'from beatflow import DAG, task\n\n@task\ndef a(): ...\n\nwith DAG("etl"):\n    a()\n'
    )
    return {
        "BEATFLOW_DAGS_FOLDER": str(tmp_path),
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'bf.db'}",
    }


def _run(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def test_db_commands_print_json(cli_env: dict[str, str]) -> None:
    code, out = _run(cli_env, "db", "upgrade", "--json")
    assert code == 0, out
    upgraded = json.loads(out)
    assert upgraded["from"] is None and upgraded["revision"]
    code, out = _run(cli_env, "db", "current", "--json")
    assert code == 0, out
    assert json.loads(out) == {
        "database": upgraded["database"],
        "revision": upgraded["revision"],
        "head": upgraded["revision"],
        "ok": True,
    }
    code, out = _run(cli_env, "db", "prune", "--older-than", "30d", "--json")
    assert code == 0, out
    assert json.loads(out) == {
        "deleted": 0,
        "older_than": "30d",
        "asset_events_deleted": 0,
        "asset_events_kept": None,  # a reason when prune keeps every asset event
    }


def test_pause_and_unpause_print_json_and_runs_list_says_unknown_dag(
    cli_env: dict[str, str],
) -> None:
    assert _run(cli_env, "db", "upgrade")[0] == 0
    code, out = _run(cli_env, "dags", "pause", "etl", "--json")
    assert code == 0, out
    assert json.loads(out) == {"dag_id": "etl", "paused": True}
    code, out = _run(cli_env, "dags", "unpause", "etl", "--json")
    assert json.loads(out) == {"dag_id": "etl", "paused": False}
    code, out = _run(cli_env, "runs", "list", "etl")
    assert (code, out.strip()) == (0, "no runs")  # a known DAG without runs
    code, out = _run(cli_env, "runs", "list", "elt")
    assert code == 1
    assert 'no DAG "elt" is loaded; did you mean "etl"?' in out
