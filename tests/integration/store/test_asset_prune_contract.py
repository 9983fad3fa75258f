"""Store contract, the retention of asset events: prune deletes the old events every consumer
consumed (and those of assets no DAG consumes), keeps the rest, so an asset-triggered DAG still
fires after it; the counters (totals plus rows) read the same before and after, whether the
prune finishes, stops between batches or is killed inside one; migration 0026 round trip."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from beatflow.dag.loader import load_dags
from beatflow.observability.metrics import Metrics
from beatflow.observability.results import ResultsPoller
from beatflow.runs.assets import asset_consumers
from beatflow.scheduler.assets import AssetPass
from beatflow.store import Store
from beatflow.store.asset_models import asset_event_totals, asset_run_totals
from beatflow.store.assets import ProducedUpdate
from beatflow.store.records import TRIGGER_ASSET, AuditNote, ScheduledRunDraft
from tests.procs import run_beatflow, wait_for

NOW = timedelta(0)  # prune's age: everything created before now


def emit(store: Store, asset: str) -> int:
    return store.emit_asset_event(asset).id


def produce(store: Store, asset: str, run_id: str) -> int:
    """An event of a producing task run's success (source "task")."""
    update = ProducedUpdate(f"etl/{run_id}/load", 1, "etl", run_id, "load")
    assert store.record_produced_events([(update, [asset])]) == 1
    return store.list_asset_events(asset, limit=1)[0].id


def consume(store: Store, dag_id: str, *event_ids: int) -> str:
    """What the beat's asset pass does: a run of ``dag_id`` consuming ``event_ids``."""
    run_id = f"asset__{max(event_ids)}"
    draft = ScheduledRunDraft(dag_id, run_id, datetime.now(UTC), TRIGGER_ASSET, {})
    assert store.create_asset_run(draft, event_ids, leader_epoch=1) is not None
    return run_id


def left(store: Store) -> set[int]:
    return {e.id for e in store.list_asset_events(limit=10_000)}


def counters(store: Store) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    return store.asset_event_totals(), store.asset_triggered_run_totals()


def test_prune_deletes_old_consumed_events_and_keeps_unconsumed_ones(store: Store) -> None:
    consumers = {"orders": ["report", "audit"], "clicks": ["report"]}
    both = emit(store, "orders")
    consume(store, "report", both)
    consume(store, "audit", both)
    one = emit(store, "orders")
    consume(store, "report", one)  # audit has not consumed it yet
    waiting = emit(store, "clicks")  # nobody has
    nobody = emit(store, "logs")  # no DAG is scheduled on logs
    newest = emit(store, "logs")

    assert store.prune_asset_events(timedelta(hours=1), consumers) == 0  # none that old
    assert store.prune_asset_events(NOW, consumers) == 2
    assert left(store) == {one, waiting, newest}  # the newest event of all stays, whatever
    assert store.asset_consumers_of([both, one]) == {one: [("report", f"asset__{one}")]}
    consume(store, "audit", one)
    assert store.prune_asset_events(NOW, consumers, batch_size=1) == 1
    assert left(store) == {waiting, newest}
    assert nobody not in left(store)
    assert store.prune_asset_events(NOW, {}) == 1  # no DAG consumes clicks any more
    assert left(store) == {newest}


def test_an_asset_dag_still_fires_after_a_prune_between_its_event_and_the_trigger_check(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "report.py").write_text(
        textwrap.dedent("""
        from beatflow import DAG, Asset, task

        @task
        def use() -> int:
            return 1

        with DAG("report", schedule=Asset("orders")):
            use()
        """)
    )
    bag = load_dags(tmp_path)
    assert bag.ok, bag.errors
    event = emit(store, "orders")
    emit(store, "logs")  # a newer event, so the newest-event rule does not keep it
    pruned = store.prune_asset_events(NOW, asset_consumers(bag))

    created: list[list[str]] = []  # the beat leader's next asset pass
    asset_pass = AssetPass(lambda: store, created.append)
    assert asset_pass.run(bag, 1, datetime.now(UTC), list) == ["report"]
    assert created == [["report"]] and pruned == 0
    (run,) = store.list_dag_runs("report")
    assert [e["id"] for e in run.conf["asset_events"]] == [event]
    # consumed now: the next prune takes it, and the DAG does not fire again
    assert store.prune_asset_events(NOW, asset_consumers(bag)) == 1
    assert asset_pass.run(bag, 1, datetime.now(UTC), list) == []


def exported(store: Store) -> dict[tuple[str, ...], float | None]:
    """What a freshly started exporter serves of the asset counters."""
    metrics = Metrics()
    ResultsPoller(store, metrics, dags=dict, default_time_limit=60.0).poll()
    sample = metrics.registry.get_sample_value
    series: dict[tuple[str, ...], float | None] = {}
    for asset in ("orders", "clicks"):
        for source in ("task", "external"):
            labels = {"asset": asset, "source": source}
            series[(asset, source)] = sample("beatflow_asset_events_total", labels)
    for dag in ("both", "report", "clicker"):
        series[(dag,)] = sample("beatflow_asset_triggered_runs_total", {"dag": dag})
    return series


CONSUMERS = {"orders": ["both", "report"], "clicks": ["both", "clicker"]}


def history(store: Store) -> None:
    """Events of both sources, and runs whose events prune can delete only in part."""
    o1, c1 = produce(store, "orders", "r1"), emit(store, "clicks")
    consume(store, "both", o1, c1)  # one run, two events
    consume(store, "report", o1)
    o2 = emit(store, "orders")
    consume(store, "report", o2)
    o3 = produce(store, "orders", "r3")
    consume(store, "report", o3)
    consume(store, "both", o3, emit(store, "clicks"))
    emit(store, "clicks")  # unconsumed


def test_the_counters_read_the_same_before_and_after_prune(store: Store) -> None:
    history(store)
    before, served = counters(store), exported(store)
    assert before == (
        {("orders", "task"): 2, ("orders", "external"): 1, ("clicks", "external"): 3},
        {"both": 2, "report": 3},
    )
    live = Metrics()  # an exporter that keeps running across the prunes
    poller = ResultsPoller(store, live, dags=dict, default_time_limit=60.0)
    poller.poll()

    # clicker consumed no clicks: both's first run keeps its clicks event, so it still counts
    assert store.prune_asset_events(NOW, CONSUMERS) == 2
    assert counters(store) == before and exported(store) == served
    consume(store, "clicker", *sorted(e.id for e in store.list_asset_events("clicks")))
    assert store.prune_asset_events(NOW, CONSUMERS) == 2
    assert len(left(store)) == 2  # an orders event both has not consumed, and the newest
    after = counters(store)
    assert after == (before[0], {"both": 2, "report": 3, "clicker": 1})
    with store._read("reading the totals") as conn:
        assert conn.execute(sa.select(sa.func.sum(asset_event_totals.c.events))).scalar() == 4
        assert dict(conn.execute(sa.select(asset_run_totals)).all()) == {"both": 2, "report": 2}

    emit(store, "orders")  # counting goes on from the totals
    poller.poll()
    sample = live.registry.get_sample_value
    assert sample("beatflow_asset_events_total", {"asset": "orders", "source": "external"}) == 2
    assert exported(store)[("orders", "external")] == 2


class Stop(Exception):
    pass


def test_a_prune_stopped_between_batches_neither_loses_nor_double_counts(store: Store) -> None:
    history(store)
    consume(store, "clicker", *sorted(e.id for e in store.list_asset_events("clicks")))
    before = counters(store)
    assert len(left(store)) == 6  # 4 of them prunable
    note = AuditNote("ops", "prune")

    def stop_after_two(n: int) -> None:
        assert n == 1
        if len(left(store)) == 4:
            raise Stop

    with pytest.raises(Stop):
        store.prune_asset_events(NOW, CONSUMERS, batch_size=1, on_batch=stop_after_two, audit=note)
    assert len(left(store)) == 4
    assert counters(store) == before
    assert store.list_audit(action="prune") == []  # written with the last batch only
    assert store.prune_asset_events(NOW, CONSUMERS, batch_size=1, audit=note) == 2
    assert counters(store) == before and len(left(store)) == 2
    (audit,) = store.list_audit(action="prune")
    assert audit.detail["asset_events_deleted"] == 2
    assert store.prune_asset_events(NOW, CONSUMERS) == 0
    assert counters(store) == before


KILLED_PRUNE = """
import sys
from datetime import timedelta
from beatflow.store import Store
consumers = {"orders": ["both", "report"], "clicks": ["both", "clicker"]}
Store(sys.argv[1]).prune_asset_events(timedelta(0), consumers, batch_size=1)
"""


def test_a_prune_killed_inside_a_batch_neither_loses_nor_double_counts(
    make_postgres_db: Callable[[], str],
) -> None:
    """PostgreSQL (SQLite's transaction is the file's, rolled back alike): the child's first
    batch has deleted its event when it waits on the totals row this test holds; SIGKILLed
    there, it leaves every event and every count where they were."""
    url = make_postgres_db()
    store = Store(url)
    try:
        store.upgrade()
        history(store)
        consume(store, "clicker", *sorted(e.id for e in store.list_asset_events("clicks")))
        with store._engine.begin() as conn:  # rows to lock; zero counts change no counter
            conn.execute(sa.insert(asset_event_totals), [
                {"asset": "orders", "source": s, "events": 0} for s in ("task", "external")
            ])  # fmt: skip
        before, remaining = counters(store), left(store)
        with store._engine.begin() as holder:
            holder.execute(sa.select(asset_event_totals).with_for_update())
            child = subprocess.Popen([sys.executable, "-c", KILLED_PRUNE, url])
            try:
                wait_for(lambda: _waiting_on_a_lock(store), timeout=60, message="child waits")
                assert left(store) == remaining  # its delete is not committed
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=10)
        assert left(store) == remaining and counters(store) == before
        assert store.prune_asset_events(NOW, CONSUMERS) == 4  # once the dead batch rolled back
        assert counters(store) == before
    finally:
        store.close()


def _waiting_on_a_lock(store: Store) -> bool:
    """Whether a session waits on a lock to add to the totals (after its batch's delete)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
        "AND query LIKE 'INSERT INTO asset_event_totals%'"
    )
    with store._read("reading the sessions") as conn:
        return bool(conn.execute(query).scalar())


def test_migration_0026_downgrades_and_upgrades_again(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
        history(store)
        consume(store, "clicker", *sorted(e.id for e in store.list_asset_events("clicks")))
        assert store.prune_asset_events(NOW, CONSUMERS) == 4
        store.downgrade("0025")
        tables = set(sa.inspect(store._engine).get_table_names())
        assert "asset_events" in tables and not tables & {"asset_event_totals", "asset_run_totals"}
        assert len(store.list_asset_events()) == 2  # the rows left stay
        store.upgrade()
        assert store.current_revision() == "0026"
        # the pruned events' counts went with the tables: the counters count what is left
        rest = {("orders", "external"): 1, ("clicks", "external"): 1}
        assert counters(store) == (rest, {"report": 1, "clicker": 1})
        emit(store, "logs")
        emit(store, "logs")
        assert store.prune_asset_events(NOW, CONSUMERS) == 1
        assert counters(store) == ({**rest, ("logs", "external"): 2}, {"report": 1, "clicker": 1})
    finally:
        store.close()


CONSUMER_DAG = """
from beatflow import DAG, Asset, task

@task
def use() -> int:
    return 1

with DAG("report", schedule=Asset("orders")):
    use()
"""


def test_db_prune_deletes_consumed_events_and_keeps_all_while_a_dag_fails_to_load(
    database_url: str, tmp_path: Path
) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "report.py").write_text(textwrap.dedent(CONSUMER_DAG))
    store = Store(database_url)
    try:
        store.upgrade()
        consume(store, "report", emit(store, "orders"))
        waiting = emit(store, "orders")
        orphan = emit(store, "logs")
        newest = emit(store, "logs")
        env = {"BEATFLOW_DAGS_FOLDER": str(dags)}
        (dags / "broken.py").write_text("import nothing_of_that_name\n")
        kept = _prune(database_url, env)
        assert kept["asset_events_deleted"] is None and "1 load error" in kept["asset_events_kept"]
        assert len(left(store)) == 4
        (dags / "broken.py").unlink()
        pruned = _prune(database_url, env)
        assert (pruned["asset_events_deleted"], pruned["asset_events_kept"]) == (2, None)
        assert left(store) == {waiting, newest} and orphan not in left(store)
        audits = store.list_audit(action="prune")
        assert [a.detail.get("asset_events_deleted") for a in audits] == [2, None]
    finally:
        store.close()


def _prune(database_url: str, env: Mapping[str, str]) -> dict[str, Any]:
    result = run_beatflow(
        {"BEATFLOW_DATABASE_URL": database_url, **env},
        "db", "prune", "--older-than", "0m", "--json", timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))
