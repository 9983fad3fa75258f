"""Data-aware scheduling on real services: a real worker, real `celery -A beatflow beat`
replicas, PostgreSQL. A producer's success triggers its consumer once; all-of and any-of
conditions; a redelivered producer records no second event; a beat leader SIGKILLed while it
schedules on assets leaves every event consumed exactly once."""

from __future__ import annotations

import json
import re
import textwrap
import types
from collections import Counter
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from beatflow.app import create_app
from beatflow.cli import main
from beatflow.dag.compile import compile_run
from beatflow.observability.metrics import Metrics
from beatflow.observability.results import ResultsPoller
from beatflow.runs.dispatch import send_canvas
from beatflow.store import DagRunRecord
from beatflow.store.asset_models import asset_events
from beatflow.store.records import AuditNote
from tests.integration.scheduler.beatcluster import BeatCluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow

PRODUCER = """
from pathlib import Path
from beatflow import DAG, Asset, task

orders = Asset("warehouse.orders")

@task(outlets=[orders])
def load() -> int:
    with open({marks!r}, "a") as f:
        f.write("ran\\n")
    return 1

with DAG("producer", schedule=None):
    load()
"""

CONSUMER = """
from beatflow import DAG, Asset, task

@task
def use() -> int:
    return 1

with DAG({dag_id!r}, schedule={schedule}):
    use()
"""


def write(cluster: BeatCluster, name: str, source: str) -> None:
    (cluster.dags / f"{name}.py").write_text(textwrap.dedent(source))


def consumer(cluster: BeatCluster, dag_id: str, schedule: str) -> None:
    write(cluster, dag_id, CONSUMER.format(dag_id=dag_id, schedule=schedule))


def cli(cluster: BeatCluster, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=dict(cluster.env))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def emit(cluster: BeatCluster, asset: str) -> int:
    note = AuditNote("test", "asset_emit", {})
    return cluster.store.emit_asset_event(asset, audit=note).id


def event_ids(run: DagRunRecord) -> list[int]:
    return [e["id"] for e in run.conf["asset_events"]]


def wait_succeeded(cluster: BeatCluster, dag_id: str, n: int) -> list[DagRunRecord]:
    wait_for(
        lambda: sum(r.state == "success" for r in cluster.runs(dag_id)) >= n,
        timeout=60,
        message=f"{n} successful runs of {dag_id}\n{cluster.logs()}",
    )
    return cluster.runs(dag_id)


def test_a_producers_success_triggers_its_consumer_once_per_success(
    cluster: BeatCluster, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    write(cluster, "producer", PRODUCER.format(marks=str(marks)))
    consumer(cluster, "orders_report", 'Asset("warehouse.orders")')
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    code, out = cli(cluster, "dags", "trigger", "producer", "--run-id", "p1", "--wait")
    assert code == 0, out
    (run,) = wait_succeeded(cluster, "orders_report", 1)
    assert run.trigger == "asset"
    (event,) = run.conf["asset_events"]
    assert event["asset"] == "warehouse.orders"
    assert (event["dag_id"], event["run_id"], event["task_id"]) == ("producer", "p1", "load")
    code, out = cli(cluster, "runs", "show", "orders_report", run.run_id)
    assert code == 0 and f"triggered by asset events: warehouse.orders #{event['id']}" in out, out
    code, out = cli(cluster, "dags", "trigger", "producer", "--run-id", "p2", "--wait")
    assert code == 0, out
    runs = wait_succeeded(cluster, "orders_report", 2)
    assert len(runs) == 2
    assert len(cluster.store.list_asset_events("warehouse.orders")) == 2


def test_the_producing_worker_records_the_event_and_the_beat_records_a_lost_one(
    cluster: BeatCluster, tmp_path: Path
) -> None:
    write(cluster, "producer", PRODUCER.format(marks=str(tmp_path / "marks")))
    consumer(cluster, "orders_report", 'Asset("warehouse.orders")')
    cluster.start_worker()
    code, out = cli(cluster, "dags", "trigger", "producer", "--run-id", "p1", "--wait")
    assert code == 0, out
    wait_for(
        lambda: cluster.store.list_asset_events("warehouse.orders"),
        timeout=30,
        message="the producer's asset event",
    )
    (event,) = cluster.store.list_asset_events("warehouse.orders")
    assert (event.dag_id, event.run_id, event.task_id) == ("producer", "p1", "load")
    # a worker killed between its success commit and that write: the beat leader's scan of
    # the producers' successes records the event (under the same key) and the consumer runs
    with cluster.store._engine.begin() as conn:
        conn.execute(sa.delete(asset_events))
    cluster.start_beat("a")
    (run,) = wait_succeeded(cluster, "orders_report", 1)
    (again,) = cluster.store.list_asset_events("warehouse.orders")
    assert again.source_key == event.source_key and event_ids(run) == [again.id]


def asset_samples(cluster: BeatCluster, polls: int = 1) -> dict[str, float | None]:
    """What an exporter's database poll serves of the asset counters (``polls`` polls)."""
    metrics = Metrics()
    poller = ResultsPoller(cluster.store, metrics, dags=dict, default_time_limit=60.0)
    for _ in range(polls):
        poller.poll()
    sample = metrics.registry.get_sample_value
    return {
        "task": sample("beatflow_asset_events_total", {"asset": "warehouse.orders",
                                                       "source": "task"}),
        "external": sample("beatflow_asset_events_total", {"asset": "warehouse.orders",
                                                           "source": "external"}),
        "runs": sample("beatflow_asset_triggered_runs_total", {"dag": "orders_report"}),
    }  # fmt: skip


def test_the_exporter_counts_asset_events_by_source_and_the_runs_they_triggered(
    cluster: BeatCluster, tmp_path: Path
) -> None:
    write(cluster, "producer", PRODUCER.format(marks=str(tmp_path / "marks")))
    consumer(cluster, "orders_report", 'Asset("warehouse.orders")')
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    code, out = cli(cluster, "dags", "trigger", "producer", "--run-id", "p1", "--wait")
    assert code == 0, out
    wait_succeeded(cluster, "orders_report", 1)
    emit(cluster, "warehouse.orders")  # from outside: a second run
    wait_succeeded(cluster, "orders_report", 2)
    expected = {"task": 1.0, "external": 1.0, "runs": 2.0}
    assert asset_samples(cluster, polls=2) == expected  # a second poll counts nothing again
    assert asset_samples(cluster) == expected  # another exporter (a replica, a restart) agrees


def test_a_redelivered_producer_records_no_second_event_and_triggers_no_second_run(
    cluster: BeatCluster, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    write(cluster, "producer", PRODUCER.format(marks=str(marks)))
    consumer(cluster, "orders_report", 'Asset("warehouse.orders")')
    consumer(cluster, "probe", 'Asset("probe")')
    worker = cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    code, out = cli(cluster, "dags", "trigger", "producer", "--run-id", "p1", "--wait")
    assert code == 0, out
    wait_succeeded(cluster, "orders_report", 1)
    done = re.compile(r"Task producer\.load\[[^\]]+\] succeeded")
    assert len(done.findall(worker.log())) == 1
    # the same run's messages again, as a redelivery would bring them
    app = create_app(cluster.settings)
    try:
        send_canvas(app, compile_run(app, app.beatflow.dag("producer"), "p1"))  # type: ignore[attr-defined]
    finally:
        app.close()
    wait_for(lambda: len(done.findall(worker.log())) == 2, timeout=60, message="redelivery")
    # a later asset pass (the probe's run proves it ran) found nothing new to record
    emit(cluster, "probe")
    wait_succeeded(cluster, "probe", 1)
    assert marks.read_text().count("ran") == 1
    assert len(cluster.store.list_asset_events("warehouse.orders")) == 1
    assert len(cluster.runs("orders_report")) == 1


def test_all_of_waits_for_every_asset_and_any_of_runs_for_each(cluster: BeatCluster) -> None:
    consumer(cluster, "both", '[Asset("a"), Asset("b")]')
    consumer(cluster, "either", 'Asset("a") | Asset("b")')
    consumer(cluster, "probe_a", 'Asset("a")')
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    first = emit(cluster, "a")
    # the pass that ran probe_a looked at "both" too: one asset of two is not enough
    wait_succeeded(cluster, "probe_a", 1)
    assert cluster.runs("both") == []
    (either,) = wait_succeeded(cluster, "either", 1)
    assert event_ids(either) == [first]
    second = emit(cluster, "b")
    (both,) = wait_succeeded(cluster, "both", 1)
    assert sorted(event_ids(both)) == [first, second]
    runs = wait_succeeded(cluster, "either", 2)
    assert sorted(event_ids(r) for r in runs) == [[first], [second]]
    third = emit(cluster, "a")
    wait_succeeded(cluster, "probe_a", 2)
    assert len(cluster.runs("both")) == 1  # b was not updated again
    fourth = emit(cluster, "b")
    both_runs = wait_succeeded(cluster, "both", 2)
    assert sorted(event_ids(r) for r in both_runs) == [[first, second], [third, fourth]]


def test_a_leader_sigkilled_while_scheduling_on_assets_leaves_each_event_consumed_once(
    cluster: BeatCluster,
) -> None:
    consumer(cluster, "orders_report", 'Asset("warehouse.orders")')
    cluster.start_worker()
    names = iter("abcdefgh")
    for _ in range(2):
        cluster.start_beat(next(names))
    emitted: list[int] = []

    def consumed() -> Counter[int]:
        return Counter(i for r in cluster.runs("orders_report") for i in event_ids(r))

    for _ in range(3):
        leader = cluster.wait_leader()
        emitted += [emit(cluster, "warehouse.orders") for _ in range(3)]
        proc = next(b for b in cluster.beats if b.name == leader and b.popen is not None)
        proc.kill()  # SIGKILL: the lease is left to expire, mid-pass or not
        cluster.beats.remove(proc)
        cluster.start_beat(next(names))
        cluster.wait_leader(among={b.name for b in cluster.beats})
        # each round's events are consumed before the next round's are emitted: its run and
        # the earlier rounds' runs must not share an event
        wait_for(
            lambda want=set(emitted): want <= set(consumed()),
            timeout=90,
            message=f"every event consumed\n{cluster.logs()}",
        )
    counts = consumed()
    assert all(n == 1 for n in counts.values()), counts
    assert set(counts) == set(emitted)
    runs = cluster.runs("orders_report")
    assert len(runs) >= 3, [event_ids(r) for r in runs]
    wait_succeeded(cluster, "orders_report", len(runs))
    assert {r.trigger for r in runs} == {"asset"}


VIEWER = "viewer-token-0123456789abcdef"


def test_emit_from_the_cli_and_the_api_triggers_the_consumer_and_is_audited(
    cluster: BeatCluster,
) -> None:
    from beatflow.runtime import runtime_of
    from beatflow.settings.accounts import hash_token
    from tests.web.conftest import PASSWORD, TOKEN, USER, serve
    from tests.web.test_api import login

    consumer(cluster, "ext_report", 'Asset("ext.feed")')
    write(cluster, "producer", PRODUCER.format(marks="/dev/null"))
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    code, out = cli(
        cluster, "assets", "emit", "ext.feed", "--extra", '{"rows": 3}',
        "--actor", "ops:ann", "--reason", "vendor file landed", "--json",
    )  # fmt: skip
    assert code == 0, out
    first = json.loads(out)
    (run,) = wait_succeeded(cluster, "ext_report", 1)
    (event,) = run.conf["asset_events"]
    assert (event["id"], event["extra"], event["actor"]) == (first["id"], {"rows": 3}, "ops:ann")
    (note,) = cluster.store.list_audit(action="asset_emit")
    assert (note.actor, note.detail["reason"], note.detail["asset"]) == (
        "ops:ann", "vendor file landed", "ext.feed",
    )  # fmt: skip
    code, out = cli(cluster, "assets", "emit", "bad name!")
    assert code != 0 and "bad asset name" in out

    app = create_app(cluster.settings)
    settings = runtime_of(app).settings.replace(
        web_user=USER,
        web_password=PASSWORD,
        web_tokens=f"ci:{TOKEN}",
        web_token_hashes=f"ro:viewer:{hash_token(VIEWER)}",
    )
    server = serve(settings, types.SimpleNamespace(app=app))  # type: ignore[arg-type]
    try:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as c:
            r = c.post("/api/v1/assets/ext.feed/events", json={"extra": {"rows": 4}})
            assert r.status_code == 201, r.text
            second = r.json()
            runs = wait_succeeded(cluster, "ext_report", 2)
            assert sorted(event_ids(r) for r in runs) == [[first["id"]], [second["id"]]]
            as_viewer = {"Authorization": f"Bearer {VIEWER}"}
            r = c.post("/api/v1/assets/ext.feed/events", json={}, headers=as_viewer)
            assert r.status_code == 403, r.text  # emitting is an operator's verb
            assert c.get("/api/v1/assets", headers=as_viewer).status_code == 200
            r = c.post("/api/v1/assets/bad name!/events", json={})
            assert r.status_code == 400, r.text
            assert (
                c.post(
                    "/api/v1/assets/x/events", json={}, headers={"Authorization": ""}
                ).status_code
                == 401
            )
            listed = {a["name"]: a for a in c.get("/api/v1/assets").json()["assets"]}
            assert listed["ext.feed"]["consumers"] == ["ext_report"]
            assert listed["ext.feed"]["event_count"] == 2
            assert listed["warehouse.orders"]["producers"] == ["producer.load"]
            one = c.get("/api/v1/assets/ext.feed").json()
            run_of = {event_ids(r)[0]: r.run_id for r in runs}
            assert [e["consumed_by"] for e in one["events"]] == [
                [{"dag_id": "ext_report", "run_id": run_of[i]}] for i in (second["id"], first["id"])
            ]
            assert c.get("/api/v1/assets/nothing.here").status_code == 404
        browser, _ = login(server)  # type: ignore[arg-type]
        try:
            page = browser.get("/assets")
            assert page.status_code == 200, page.text
            row = page.text.split('data-asset="ext.feed"')[1].split("</tr>")[0]
            assert "outside (emit)" in row and ">ext_report</a>" in row and "ops:ann" in row
            row = page.text.split('data-asset="warehouse.orders"')[1].split("</tr>")[0]
            assert ">producer.load</a>" in row
            dag_page = browser.get("/dags/ext_report")
            assert "scheduled on assets: ext.feed" in dag_page.text
        finally:
            browser.close()
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=10)
        app.close()
    code, out = cli(cluster, "assets", "list", "--json")
    assert code == 0, out
    assert {a["name"] for a in json.loads(out)} == {"ext.feed", "warehouse.orders"}
    code, out = cli(cluster, "assets", "show", "ext.feed", "--json")
    assert code == 0, out
    assert json.loads(out)["event_count"] == 2
    code, out = cli(cluster, "assets", "list")
    assert "producer.load -> warehouse.orders -> -" in out, out
