"""The shipped dags/example_sensors.py on a real worker: with its inbox holding the day's file
and the READY flag, both sensors are done at their first poke and `load` gets what they found."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests import procs
from tests.cluster import own_cluster

pytestmark = pytest.mark.slow


def test_the_sensors_example_loads_what_its_sensors_found(tmp_path, redis_server, postgres_server):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    when = datetime(2026, 12, 6, tzinfo=UTC)
    (inbox / "orders-2026-12-06.csv").write_text("id\n1\n")
    (inbox / "READY").write_text("v1\n")
    env = {"EXAMPLE_SENSORS_INBOX": str(inbox)}
    dags = procs.ROOT / "dags"
    with own_cluster(redis_server, postgres_server, tmp_path, dags=dags, env=env) as c:
        final, tasks = c.run("example_sensors", logical_date=when)
        assert final.state == "success", tasks
        assert tasks["wait_for_file"].result == [str(inbox / "orders-2026-12-06.csv")]
        assert tasks["ready_flag"].result == "v1"
        assert tasks["load"].result == "loaded 1 file(s), flag 'v1'"
