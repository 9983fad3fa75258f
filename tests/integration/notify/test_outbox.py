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


def test_the_outbox_pages_newest_first_with_its_filters(database_url: str) -> None:
    store = Store(database_url)
    store.upgrade()
    keys = []
    for i, (dag_id, kind) in enumerate(
        [("a", "failure"), ("b", "success"), ("a", "success"), ("a", "failure")]
    ):
        key = f"{dag_id}/r{i}/t/-1/1/{kind}/0"
        store.add_notification(key, dag_id=dag_id, run_id=f"r{i}", kind=kind,
                               payload={"context": {}, "index": 0})  # fmt: skip
        keys.append(key)
    assert store.take_notification(keys[0]) is not None
    store.end_notification(keys[0], state="failed", tries=3, error="boom")

    def page(**filters: object) -> tuple[list[str], int | None]:
        found, next_offset = store.page_notifications(**filters)  # type: ignore[arg-type]
        return [n.event_key for n in found], next_offset

    assert page() == (keys[::-1], None)
    assert page(dag_id="a") == ([keys[3], keys[2], keys[0]], None)
    assert page(dag_id="a", kind="failure") == ([keys[3], keys[0]], None)
    assert page(state="failed") == ([keys[0]], None)
    assert page(dag_id="a", run_id="r2") == ([keys[2]], None)
    assert page(limit=3) == (keys[:0:-1], 3)
    assert page(limit=3, offset=3) == ([keys[0]], None)
    store.close()
