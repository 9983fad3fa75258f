"""The shipped dags/example_branching.py on a real worker, run to completion: the branch, the
join, the short-circuit and the Skip each do what its docstring says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import procs
from tests.cluster import Cluster, own_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shipped(redis_server, postgres_server, tmp_path_factory) -> Iterator[Cluster]:
    """A worker loading the shipped dags/ folder."""
    tmp = tmp_path_factory.mktemp("shipped")
    with own_cluster(redis_server, postgres_server, tmp, dags=procs.ROOT / "dags") as c:
        yield c


def test_the_branching_example_takes_one_load_joins_publishes_and_skips_the_archive(shipped):
    final, tasks = shipped.run("example_branching")
    assert final.state == "success", tasks
    assert {t: r.state for t, r in tasks.items()} == {
        "count_new_rows": "success",
        "choose_load": "success",
        "full_load": "skipped",
        "incremental_load": "success",
        "report": "success",
        "worth_publishing": "success",
        "publish": "success",
        "archive": "skipped",
    }
    assert tasks["publish"].result == "published 42 rows"
    assert tasks["archive"].error == "archiving is off for this run"


def test_no_new_rows_short_circuit_the_publish_and_a_big_batch_takes_the_full_load(shipped):
    final, tasks = shipped.run("example_branching", conf={"new_rows": 0, "archive": True})
    assert final.state == "success", tasks
    assert tasks["publish"].state == "skipped"
    assert tasks["publish"].error == "short-circuit worth_publishing returned 0"
    assert tasks["archive"].result == "archived"
    final, tasks = shipped.run("example_branching", conf={"new_rows": 5000})
    assert (tasks["full_load"].state, tasks["incremental_load"].state) == ("success", "skipped")
    assert tasks["report"].state == "success"
