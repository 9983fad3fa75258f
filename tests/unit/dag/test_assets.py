"""Assets in DAG files: names, conditions (all-of, any-of, mixed), outlets, and what
`beatflow dags check` says of a bad asset schedule."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow import DAG, Asset, task
from beatflow.cli import main
from beatflow.dag.assets import AssetAll, AssetAny, asset_condition, schedule_text
from beatflow.errors import DagDefinitionError

a, b, c = Asset("a"), Asset("warehouse.b"), Asset("s3://bucket/c")


def test_a_list_is_all_of_and_a_pipe_any_of_and_they_mix() -> None:
    both = asset_condition([a, b])
    assert isinstance(both, AssetAll) and both.names() == {"a", "warehouse.b"}
    assert not both.met({"a"}) and both.met({"a", "warehouse.b"})
    either = a | b
    assert isinstance(either, AssetAny)
    assert either.met({"a"}) and either.met({"warehouse.b"}) and not either.met(set())
    mixed = (a & b) | c
    assert mixed.met({"s3://bucket/c"}) and mixed.met({"a", "warehouse.b"})
    assert not mixed.met({"a"})
    assert mixed.describe() == "(a & warehouse.b) | s3://bucket/c"


@pytest.mark.parametrize("name", ["", "has space", "-leading", "x" * 251, "semi;colon"])
def test_a_bad_asset_name_is_refused_saying_why(name: str) -> None:
    with pytest.raises(ValueError, match="asset name"):
        Asset(name)


def test_outlets_and_an_asset_schedule_land_in_the_model() -> None:
    @task(outlets=[a, "warehouse.b"])
    def load() -> int:
        return 1

    with DAG("produces") as producer:
        load()
    assert producer.model.tasks["load"].outlets == ("a", "warehouse.b")
    with DAG("consumes", schedule=[a, b]) as consumer:
        load.override(outlets=None)()
    assert consumer.model.schedule is None
    assert schedule_text(None, consumer.model.asset_schedule) == "assets: a & warehouse.b"


def test_an_empty_asset_list_and_bad_outlets_are_definition_errors() -> None:
    with pytest.raises(DagDefinitionError, match="empty list of assets"):
        DAG("empty", schedule=[])
    with pytest.raises(DagDefinitionError, match="expected an Asset"):
        DAG("wrong", schedule=[a, 5])

    @task(outlets=["bad name"])
    def bad() -> None: ...

    with DAG("bad_outlets"), pytest.raises(DagDefinitionError, match="bad asset name"):
        bad()


def test_dags_check_names_a_bad_asset_schedule_by_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text(
        textwrap.dedent("""
        from beatflow import DAG

        with DAG("empty", schedule=[]):
            pass
        """)
    )
    result = CliRunner().invoke(
        main, ["dags", "check", "--json"], env={"BEATFLOW_DAGS_FOLDER": str(tmp_path)}
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    (error,) = data["errors"]
    assert error["line"] == 4 and "empty list of assets" in error["error"]


def test_the_example_producer_and_consumer_check_clean() -> None:
    result = CliRunner().invoke(
        main, ["dags", "check", "--json"], env={"BEATFLOW_DAGS_FOLDER": "dags"}
    )
    assert result.exit_code == 0, result.output
    assert {"example_assets_producer", "example_assets_consumer"} <= set(
        json.loads(result.output)["dags"]
    )
