"""The notifications outbox on both databases: an event is written once (a duplicate writes
nothing), claimed by one delivery, ended once; pending events are listed for the re-send."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beatflow.store import Store


def test_an_event_is_written_once_claimed_once_and_ended(database_url: str) -> None:
    store = Store(database_url)
    store.upgrade()
    payload = {"context": {"dag_id": "d", "run_id": "r"}, "index": 0}
    key = "d/r/t/-1/1/failure/0"
    args = {"dag_id": "d", "run_id": "r", "kind": "failure", "payload": payload}
    assert store.add_notification(key, **args) is True
    assert store.add_notification(key, **args) is False  # the same event again: nothing
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert store.pending_notifications(later) == [key]
    assert store.pending_notifications(later - timedelta(hours=1)) == []
    assert store.take_notification(key) == payload
    assert store.take_notification(key) is None  # a second delivery gets nothing to send
    assert store.take_notification("no/such/event") is None
    assert store.pending_notifications(later) == []
    store.end_notification(key, state="sent", tries=2)
    row = store.get_notification(key)
    assert row is not None
    assert (row.state, row.tries, row.kind, row.error) == ("sent", 2, "failure", None)
    assert row.claimed_at is not None and row.ended_at is not None
    assert [r.event_key for r in store.list_notifications("d", "r")] == [key]
    store.close()


def test_a_pruned_run_takes_its_notifications_with_it(database_url: str) -> None:
    store = Store(database_url)
    store.upgrade()
    store.create_dag_run("d", "old")
    store.finish_dag_run("d", "old", "success")
    store.create_dag_run("d", "kept")
    for run_id in ("old", "kept"):
        store.add_notification(
            f"d/{run_id}/@dag/-1/0/success/0", dag_id="d", run_id=run_id, kind="success",
            payload={"context": {}, "index": 0},
        )  # fmt: skip
    assert store.prune(timedelta(0)) == 1
    assert [r.run_id for r in store.list_notifications("d")] == ["kept"]
    store.close()
