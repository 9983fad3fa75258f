"""The shipped examples dags/example_task_groups.py and dags/example_params.py run to the end on a
real worker: grouped (dotted) task ids, a mapped task inside a group, group edges, per-group
retries; params' defaults, a conf checked at the trigger, and the CLI's error for a bad one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.errors import ConfError
from tests import services
from tests.cluster import Cluster, own_cluster

pytestmark = pytest.mark.slow

SHIPPED = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def examples(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("examples")
    with own_cluster(redis_server, postgres_server, tmp, dags=SHIPPED) as c:
        yield c


def test_the_task_groups_example_runs_to_success_with_grouped_ids(examples: Cluster) -> None:
    run, tasks = examples.run("example_task_groups")
    assert run.state == "success", examples.log_tail()
    assert {t.state for t in tasks.values()} == {"success"}
    assert tasks["transform.merge"].result == [100, 200, 300, 1000, 2000]
    assert tasks["shop.normalise[2]"].result == 300  # a mapped task inside a group
    assert tasks["transform.quality.not_empty"].result == 5
    assert tasks["publish"].result == 3600 and tasks["announce"].result == "published"


def test_the_params_example_takes_defaults_checks_a_conf_and_the_cli_says_why(
    examples: Cluster,
) -> None:
    run, tasks = examples.run("example_params")
    assert run.state == "success", examples.log_tail()
    assert run.conf == {"region": "eu", "batch_size": 100, "day": "2026-01-01", "dry_run": False}
    assert tasks["export"].result == {"region": "eu", "day": "2026-01-01", "rows": 100}
    run, tasks = examples.run("example_params", conf={"region": "us", "batch_size": 7})
    assert tasks["export"].result == {"region": "us", "day": "2026-01-01", "rows": 7}
    with pytest.raises(ConfError) as refused:
        examples.run("example_params", conf={"region": "mars", "batch_size": 0})
    assert refused.value.fields == {
        "region": "must be one of 'eu', 'us', 'apac', got 'mars'",
        "batch_size": "must be at least 1, got 0",
    }
    argv = ["dags", "trigger", "example_params", "--conf", '{"day": "06/12/2026"}']
    result = CliRunner().invoke(main, argv, env=examples.settings_env)
    assert result.exit_code != 0
    assert result.output.startswith("error: ")
    assert '"day" must match the pattern' in result.output
    assert len(examples.store.list_dag_runs("example_params", limit=100)) == 2
