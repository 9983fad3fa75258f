"""Sensors on real workers: a file sensor in reschedule mode frees its worker slot between pokes
and completes when the file appears; poke mode holds its slot; timeouts fail (no retries) or,
with soft_fail, skip; and the built-in SQL (on the test PostgreSQL), HTTP (a local server) and
other-DAG sensors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import sqlalchemy as sa

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import Cluster, cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def pokes_made(c: Cluster, dag_id: str, run_id: str, task_id: str) -> int:
    recorded = c.store.sensor_pokes(f"{dag_id}/{run_id}/{task_id}")
    return 0 if recorded is None else recorded.poke_count


def wait_pokes(c: Cluster, dag_id: str, run_id: str, task_id: str, n: int = 2) -> None:
    wait_for(
        lambda: pokes_made(c, dag_id, run_id, task_id) >= n,
        timeout=60,
        message=f"{n} pokes of {task_id}",
    )


def test_a_file_sensor_frees_its_slot_between_pokes_and_completes_when_the_file_appears(
    tmp_path, redis_url, postgres_url
):
    with cluster(tmp_path, redis_url, postgres_url, workers=0) as c:
        c.start_worker(concurrency=1)  # one slot: the sensor must give it back to let others run
        c.marks.mkdir(parents=True, exist_ok=True)
        run_id = trigger_dag(runtime_of(c.app), "t_sensor_file").run_id
        wait_pokes(c, "t_sensor_file", run_id, "wait_for_file")
        key = f"t_sensor_file/{run_id}/wait_for_file"
        assert c.store.get_task_run(key).state in ("up_for_reschedule", "running")
        # between pokes the only slot is free: another DAG's task runs meanwhile
        final, _ = c.run("t_sensor_quick", timeout=60)
        assert final.state == "success"
        assert c.store.get_dag_run("t_sensor_file", run_id).state == "running"
        (c.marks / f"ready-{run_id}.csv").write_text("")
        final, tasks = c.wait("t_sensor_file", run_id, timeout=60)
        assert final.state == "success", tasks
        found = [str(c.marks / f"ready-{run_id}.csv")]
        assert tasks["wait_for_file"].result == found
        assert tasks["wait_for_file"].try_number == 1  # reschedules consume no retry
        assert tasks["after"].result == f"after {found}"
        assert pokes_made(c, "t_sensor_file", run_id, "wait_for_file") >= 2


def test_poke_mode_pokes_in_its_slot_until_done(cluster):
    run_id = trigger_dag(runtime_of(cluster.app), "t_sensor_poke").run_id
    cluster.marks.mkdir(parents=True, exist_ok=True)
    wait_for(lambda: cluster.count(f"poke-{run_id}") >= 2, timeout=60, message="two pokes")
    assert cluster.store.get_task_run(f"t_sensor_poke/{run_id}/in_place").state == "running"
    (cluster.marks / f"ready-{run_id}").write_text("")
    final, tasks = cluster.wait("t_sensor_poke", run_id, timeout=60)
    assert final.state == "success", tasks
    assert tasks["in_place"].result == {"found": True}
    assert tasks["in_place"].try_number == 1
    assert tasks["after"].result == "after {'found': True}"
    assert cluster.store.sensor_pokes(f"t_sensor_poke/{run_id}/in_place") is None


def test_a_sensor_past_its_timeout_fails_without_its_retries(cluster):
    final, tasks = cluster.run("t_sensor_timeout", timeout=60)
    assert final.state == "failed", tasks
    assert tasks["never"].state == "failed"
    assert tasks["never"].error.startswith("SensorTimeout: sensor timed out after ")
    assert tasks["never"].try_number == 1  # retries=3, but a timeout is final
    assert cluster.count(f"poke-{final.run_id}") >= 2
    assert tasks["after"].state == "upstream_failed"
    letters = cluster.store.list_dead_letters("t_sensor_timeout")
    assert [d.task_id for d in letters if d.run_id == final.run_id] == ["never"]


def test_a_soft_fail_sensor_past_its_timeout_is_skipped(cluster):
    final, tasks = cluster.run("t_sensor_soft", timeout=60)
    assert final.state == "success", tasks
    assert tasks["never_soft"].state == "skipped"
    assert tasks["never_soft"].error.startswith("sensor timed out after ")
    assert tasks["after"].state == "skipped"


def test_a_poke_mode_sensor_past_its_timeout_fails(cluster):
    final, tasks = cluster.run("t_sensor_poke_timeout", timeout=60)
    assert final.state == "failed", tasks
    assert tasks["never_in_place"].error.startswith("SensorTimeout: sensor timed out after ")


def test_external_run_waits_for_the_other_dags_run_of_the_same_logical_date(cluster):
    rt = runtime_of(cluster.app)
    when = datetime(2026, 3, 1, tzinfo=UTC)
    other = trigger_dag(rt, "t_sensor_upstream", logical_date=datetime(2026, 3, 2, tzinfo=UTC))
    assert cluster.wait("t_sensor_upstream", other.run_id)[0].state == "success"
    run_id = trigger_dag(rt, "t_sensor_external", logical_date=when).run_id
    wait_pokes(cluster, "t_sensor_external", run_id, "wait_for_t_sensor_upstream")
    assert cluster.store.get_dag_run("t_sensor_external", run_id).state == "running"
    upstream = trigger_dag(rt, "t_sensor_upstream", logical_date=when)
    final, tasks = cluster.wait("t_sensor_external", run_id, timeout=60)
    assert final.state == "success", tasks
    assert tasks["wait_for_t_sensor_upstream"].result == "success"
    assert cluster.store.get_dag_run("t_sensor_upstream", upstream.run_id).state == "success"


def test_external_run_of_a_task(cluster):
    rt = runtime_of(cluster.app)
    when = datetime(2026, 3, 5, tzinfo=UTC)
    trigger_dag(rt, "t_sensor_upstream", logical_date=when)
    final, tasks = cluster.run("t_sensor_external_task", logical_date=when, timeout=60)
    assert final.state == "success", tasks
    assert tasks["wait_for_upstream_work"].result == "success"


def test_a_sql_sensor_waits_for_a_truthy_first_cell(cluster):
    engine = sa.create_engine(cluster.env["BEATFLOW_DATABASE_URL"])
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE sensor_flags (name text, note text)"))
    run_id = trigger_dag(runtime_of(cluster.app), "t_sensor_sql").run_id
    wait_pokes(cluster, "t_sensor_sql", run_id, "wait_for_sql")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO sensor_flags VALUES ('go', 'green')"))
    engine.dispose()
    final, tasks = cluster.wait("t_sensor_sql", run_id, timeout=60)
    assert final.state == "success", tasks
    assert tasks["wait_for_sql"].result == "green"


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, int], threading.Event]]:
    hits = {"n": 0}
    ready = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits["n"] += 1
            body = b"ready" if ready.is_set() else b"starting"
            self.send_response(200 if ready.is_set() else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health", hits, ready
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_sensor_waits_for_its_endpoint(cluster, http_server):
    url, hits, ready = http_server
    run_id = trigger_dag(runtime_of(cluster.app), "t_sensor_http", conf={"url": url}).run_id
    wait_pokes(cluster, "t_sensor_http", run_id, "wait_for_http")
    assert hits["n"] >= 2
    ready.set()
    final, tasks = cluster.wait("t_sensor_http", run_id, timeout=60)
    assert final.state == "success", tasks
    assert tasks["wait_for_http"].result == "ready"
