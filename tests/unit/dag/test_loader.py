"""Loading the dags folder: every kind of broken module is reported by file and line while
every other DAG still loads; `beatflow dags check` and `dags list` say so."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.dag.loader import load_dags

GOOD = """
from beatflow import DAG, task

@task
def hello() -> str:
    return "hi"

with DAG("good"):
    hello()
"""

BROKEN = {
    "syntax.py": ("def oops(:\n    pass\n", 1, "SyntaxError"),
    "imports.py": ("import os\nimport no_such_module_xyz\n", 2, "ModuleNotFoundError"),
    "raises.py": ("x = 1\n\nraise RuntimeError('boom at import')\n", 3, "boom at import"),
    "cycle.py": (
        textwrap.dedent("""
        from beatflow import DAG, task

        @task
        def a(): ...

        with DAG("cyclic"):
            x = a.override(task_id="x")()
            y = a.override(task_id="y")()
            x >> y >> x
        """),
        8,
        "cycle: x -> y -> x",
    ),
    "dup_task.py": (
        textwrap.dedent("""
        from beatflow import DAG, task

        @task
        def a(): ...

        with DAG("dup_task"):
            a.override(task_id="same")()
            a.override(task_id="same")()
        """),
        9,
        'duplicate task id "same"',
    ),
    "bad_schedule.py": (
        textwrap.dedent("""
        from beatflow import DAG

        with DAG("bad_schedule", schedule="every tuesday"):
            pass
        """),
        4,
        "invalid cron expression",
    ),
    "bad_tz.py": (
        textwrap.dedent("""
        from beatflow import DAG

        with DAG("bad_tz", schedule="@daily", timezone="Europe/Atlantis"):
            pass
        """),
        4,
        "unknown time zone",
    ),
    "zz_duplicate_dag.py": (GOOD, 8, 'duplicate DAG id "good"'),
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "good.py").write_text(GOOD)
    for name, (source, _, _) in BROKEN.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "_helpers.py").write_text("raise SystemExit('private modules are not loaded')\n")
    return tmp_path


def test_every_broken_module_is_reported_by_file_and_line_and_the_good_dag_loads(folder):
    bag = load_dags(folder)
    assert list(bag.dags) == ["good"]
    by_file = {Path(e.file).name: e for e in bag.errors}
    assert set(by_file) == set(BROKEN)
    for name, (_, line, text) in BROKEN.items():
        err = by_file[name]
        assert text in err.message, (name, err.message)
        assert err.line == line, (name, err.line, err.message)


def test_a_dag_module_can_import_its_own_helper_module(tmp_path):
    (tmp_path / "_shared.py").write_text("GREETING = 'hi'\n")
    (tmp_path / "uses.py").write_text(
        GOOD.replace('"hi"', "_shared.GREETING").replace(
            "from beatflow", "import _shared\nfrom beatflow"
        )
    )
    bag = load_dags(tmp_path)
    assert bag.ok and "good" in bag.dags


def test_dags_check_exits_non_zero_and_names_every_broken_file(folder):
    result = CliRunner().invoke(main, ["dags", "check"], env={"BEATFLOW_DAGS_FOLDER": str(folder)})
    assert result.exit_code == 1
    for name in BROKEN:
        assert name in result.output
    assert "1 DAGs loaded, 8 broken" in result.output


def test_dags_check_passes_on_the_shipped_examples():
    result = CliRunner().invoke(
        main, ["dags", "check", "--json"], env={"BEATFLOW_DAGS_FOLDER": "dags"}
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    shipped = {"example_etl", "example_fan_out", "example_trigger_rules", "example_branching"}
    assert data["ok"] and shipped <= set(data["dags"])


def test_dags_list_shows_broken_dags_with_their_errors(folder, tmp_path):
    env = {
        "BEATFLOW_DAGS_FOLDER": str(folder),
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path}/list.db",
    }
    result = CliRunner().invoke(main, ["dags", "list", "--json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["dag_id"] for d in data["dags"]] == ["good"]
    assert data["dags"][0]["paused"] is False
    assert {Path(e["file"]).name for e in data["errors"]} == set(BROKEN)


def test_a_missing_dags_folder_is_an_error_not_an_empty_success(tmp_path):
    bag = load_dags(tmp_path / "nope")
    assert not bag.ok and "does not exist" in bag.errors[0].message
