"""A sensor's pokes in the API's task run and on the UI's task page, against a real worker,
Redis and PostgreSQL: while it waits (up_for_reschedule) its first and next poke; once done
the first poke stays and the next is gone; other task runs have none."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.procs import wait_for
from tests.web.conftest import PASSWORD, TOKEN, USER, WebServer, serve

pytestmark = pytest.mark.slow


@pytest.fixture
def sensor_web(tmp_path, redis_url, postgres_url) -> Iterator[WebServer]:
    with cluster(tmp_path, redis_url, postgres_url) as c:  # tests/dags: t_sensor_slow
        settings = runtime_of(c.app).settings.replace(
            web_user=USER, web_password=PASSWORD, web_tokens=f"ci:{TOKEN}"
        )
        server = serve(settings, c)
        try:
            yield server
        finally:
            server.server.should_exit = True
            server.thread.join(timeout=10)


def test_a_waiting_sensor_shows_its_first_and_next_poke(sensor_web: WebServer) -> None:
    c = sensor_web.cluster
    c.marks.mkdir(parents=True, exist_ok=True)
    run_id = trigger_dag(runtime_of(c.app), "t_sensor_slow").run_id  # 12 s between pokes
    base = f"/api/v1/dags/t_sensor_slow/runs/{run_id}/tasks"
    with sensor_web.client() as api:

        def waiting() -> dict[str, Any] | None:
            body: dict[str, Any] = api.get(f"{base}/slow").json()  # 404 until it is claimed
            return body if body.get("state") == "up_for_reschedule" else None

        task: Any = wait_for(waiting, timeout=60, message="the sensor to wait between pokes")
        assert task["poke_count"] >= 1
        first = datetime.fromisoformat(task["first_poke_at"])
        assert datetime.fromisoformat(task["next_poke_at"]) > first
        page = api.get(f"/dags/t_sensor_slow/runs/{run_id}/tasks/slow")
        assert page.status_code == 200
        assert 'id="task-next-poke"' in page.text and 'id="task-pokes"' in page.text

        (c.marks / f"ready-{run_id}").write_text("")
        final = sensor_web.wait_run("t_sensor_slow", run_id, timeout=60)
        assert final["state"] == "success"
        done = api.get(f"{base}/slow").json()
        assert done["state"] == "success"
        assert datetime.fromisoformat(done["first_poke_at"]) == first
        assert done["next_poke_at"] is None  # no poke is due any more
        page = api.get(f"/dags/t_sensor_slow/runs/{run_id}/tasks/slow")
        assert 'id="task-next-poke"' not in page.text
        after = api.get(f"{base}/after").json()
        assert (after["poke_count"], after["first_poke_at"], after["next_poke_at"]) == (
            None, None, None
        )  # fmt: skip
