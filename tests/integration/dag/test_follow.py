"""Following a run (`dags trigger --wait`, runs.follow_run) is woken by the run's announcement
on Redis, not by polling: with the fallback poll pushed out to an hour, the follower still
returns once the run is final. Real worker, Redis and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from beatflow.execution import announce
from beatflow.runs import follow_run, trigger_and_follow, trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from beatflow.store import DagRunRecord
from tests import procs

pytestmark = pytest.mark.slow

NO_POLL = 3600.0  # the fallback read would come after an hour: only an announcement wakes us


def follow_in_thread(cluster, dag_id: str, run_id: str, **kw: object) -> dict[str, object]:
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["final"] = follow_run(runtime_of(cluster.app), dag_id, run_id, **kw)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    threading.Thread(target=body, daemon=True).start()
    return out


def test_a_followed_run_is_seen_final_without_polling(cluster):
    record = trigger_dag(runtime_of(cluster.app), "t_chain")
    out = follow_in_thread(cluster, "t_chain", record.run_id, poll=NO_POLL, timeout=2 * NO_POLL)
    procs.wait_for(lambda: out, timeout=90, message="follow_run to return after the run ends")
    assert "error" not in out, out
    final = out["final"]
    assert isinstance(final, DagRunRecord) and final.state == DagRunState.SUCCESS
    stored = cluster.store.get_dag_run("t_chain", record.run_id)
    assert stored is not None and stored.state == DagRunState.SUCCESS


def test_the_announced_end_is_returned_without_reading_the_run_back(cluster, monkeypatch):
    """The closing worker publishes the run as its closing statement committed it: the
    follower returns that, and reads the run only once, to mark it followed (a read after the
    wake-up sat on a chain's critical path: 0.5 ms idle, 1.6 ms with the worker busy)."""
    store = runtime_of(cluster.app).store
    follower: dict[str, int] = {}
    reads: list[tuple[object, ...]] = []
    real = store.get_dag_run

    def counted(*args: object, **kwargs: object) -> object:
        if threading.get_ident() == follower.get("thread"):
            reads.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "get_dag_run", counted)
    # held until its gate opens, which the test does once the follower has marked the run: the
    # follower's end is the announcement's, never its first read's
    record = trigger_dag(runtime_of(cluster.app), "t_gated", conf={"hold": 120.0})
    out: dict[str, object] = {}

    def body() -> None:
        follower["thread"] = threading.get_ident()
        try:
            out["final"] = follow_run(
                runtime_of(cluster.app), "t_gated", record.run_id, poll=NO_POLL, timeout=2 * NO_POLL
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    threading.Thread(target=body, daemon=True).start()

    def marked() -> bool:
        run = real("t_gated", record.run_id)
        return run is not None and run.followed

    procs.wait_for(marked, timeout=60, message="the follower to mark the run followed")
    assert real("t_gated", record.run_id).state == DagRunState.RUNNING  # type: ignore[union-attr]
    (cluster.marks / f"gate-{record.run_id}").write_text("")
    procs.wait_for(lambda: out, timeout=90, message="follow_run to return after the run ends")
    assert "error" not in out, out
    stored = real("t_gated", record.run_id)
    assert stored is not None and stored.state == DagRunState.SUCCESS
    assert out["final"] == stored
    assert reads == []


def counting(monkeypatch, store, *names: str) -> list[str]:
    """The calls this thread makes to the store's ``names`` (they still run)."""
    calls: list[str] = []
    me = threading.get_ident()
    for name in names:
        real = getattr(store, name)

        def counted(*args: object, _real=real, _name=name, **kwargs: object) -> object:
            if threading.get_ident() == me:
                calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    return calls


def test_a_run_triggered_and_followed_is_created_followed_and_never_read(cluster, monkeypatch):
    """trigger_and_follow subscribes before the trigger, so the run is created marked followed
    (migration 0018): the follower neither marks it (a second write beside the run's first task)
    nor reads it; the announced end, the only wake-up within the timeout, is what it returns."""
    store = runtime_of(cluster.app).store
    calls = counting(monkeypatch, store, "follow_dag_run", "get_dag_run", "get_task_runs")
    seen: list[DagRunRecord] = []

    def triggered(record: DagRunRecord) -> None:
        seen.append(record)
        cluster.marks.mkdir(parents=True, exist_ok=True)
        (cluster.marks / f"gate-{record.run_id}").write_text("")  # let the run end

    final = trigger_and_follow(
        runtime_of(cluster.app),
        "t_gated",
        conf={"hold": 120.0},
        on_triggered=triggered,
        poll=NO_POLL,
        timeout=120,
    )
    assert calls == []
    [record] = seen
    assert record.followed and record.state == DagRunState.RUNNING
    stored = cluster.store.get_dag_run("t_gated", record.run_id)
    assert stored is not None and stored.state == DagRunState.SUCCESS and stored.followed
    assert final == stored


def test_trigger_and_follow_of_a_run_id_that_exists_marks_it_and_follows_it(cluster):
    """The same run id again creates nothing: the run keeps its (absent) mark, so the follower
    marks it with its first read, as follow_run does, and is woken by the end."""
    first = trigger_dag(
        runtime_of(cluster.app), "t_gated", conf={"hold": 120.0}, run_id="follow-again"
    )
    assert not first.followed
    seen: list[DagRunRecord] = []

    def triggered(record: DagRunRecord) -> None:
        seen.append(record)
        cluster.marks.mkdir(parents=True, exist_ok=True)
        (cluster.marks / f"gate-{record.run_id}").write_text("")

    final = trigger_and_follow(
        runtime_of(cluster.app),
        "t_gated",
        conf={"hold": 1.0},
        run_id="follow-again",
        on_triggered=triggered,
        poll=NO_POLL,
        timeout=120,
    )
    assert [r.run_id for r in seen] == ["follow-again"] and not seen[0].followed
    assert final.state == DagRunState.SUCCESS and final.conf == first.conf
    stored = cluster.store.get_dag_run("t_gated", "follow-again")
    assert stored is not None and stored.followed and stored.state == DagRunState.SUCCESS


def test_task_changes_reach_the_callback_and_the_end_is_seen(cluster):
    seen: list[tuple[str, str]] = []
    record = trigger_dag(runtime_of(cluster.app), "t_chain")
    out = follow_in_thread(
        cluster,
        "t_chain",
        record.run_id,
        poll=NO_POLL,
        timeout=2 * NO_POLL,
        on_task_change=lambda t: seen.append((t.task_id, t.state)),
    )
    procs.wait_for(lambda: out, timeout=90, message="follow_run to return after the run ends")
    assert "error" not in out, out
    assert {t for t, s in seen if s == "success"} == set(cluster.tasks("t_chain", record.run_id))


def test_a_run_closed_without_an_announcement_is_found_by_the_fallback_poll(cluster):
    # a run finished by a path that announces nothing (here: the store directly)
    run = cluster.store.create_dag_run(
        "t_chain", "follow-fallback", logical_date=datetime.now(UTC), trigger="manual", conf={}
    )[0]
    out = follow_in_thread(cluster, "t_chain", run.run_id, poll=0.2, timeout=120)
    cluster.store.finish_dag_run("t_chain", run.run_id, "failed")
    procs.wait_for(lambda: out, timeout=60, message="the fallback poll to see the end")
    assert "error" not in out, out
    assert out["final"].state == DagRunState.FAILED  # type: ignore[attr-defined]


def test_only_the_end_of_a_followed_run_is_announced(cluster):
    """A worker publishes a run's end only when someone follows it (migration 0013): a run
    nobody follows costs no publish. A spy on every run channel of the DAG sees the followed
    run's announcement and nothing of the other's, though that one ended first: Redis hands a
    publish to its subscribers before it answers the publisher, and the worker logs the end
    after the publish, so waiting for that log line leaves nothing in flight."""
    client = announce.client_of(cluster.app)
    assert client is not None
    spy = client.pubsub(ignore_subscribe_messages=True)
    spy.psubscribe(f"{announce.CHANNEL_PREFIX}t_chain/*")
    try:
        alone = trigger_dag(runtime_of(cluster.app), "t_chain")
        procs.wait_for(
            lambda: any(
                f"DAG run t_chain/{alone.run_id} finished" in w.log() for w in cluster.workers
            ),
            timeout=90,
            message="the unfollowed run to end",
        )
        followed = trigger_dag(runtime_of(cluster.app), "t_chain")
        final = follow_run(
            runtime_of(cluster.app), "t_chain", followed.run_id, poll=NO_POLL, timeout=120
        )
        assert final.state == DagRunState.SUCCESS
        seen: list[str] = []
        wanted = announce.channel("t_chain", followed.run_id)

        def followed_seen() -> bool:
            message = spy.get_message(timeout=0.2)
            if message is not None:
                seen.append(message["channel"].decode())
            return wanted in seen

        procs.wait_for(followed_seen, timeout=30, message="the followed run's announcement")
        assert seen == [wanted], seen
    finally:
        spy.close()
