"""trigger_dags: many manual runs in a few round trips, each as trigger_dag would make it; a bad
request creates nothing (issue #14)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from celery import Celery

from beatflow.errors import (
    BrokerUnavailableError,
    ConfError,
    DagNotFoundError,
    InvalidIdError,
    StoreError,
)
from beatflow.runs import RunRequest, trigger_dag, trigger_dags
from beatflow.runs import trigger as trigger_module
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.integration.runs.conftest import make_app, sent_run_ids
from tests.services import free_port

CHAIN_FIRST = "t_chain.numbers"  # one of the tasks a t_chain run's canvas starts with


def test_a_batch_is_created_in_order_sent_once_and_costs_two_transactions(
    app: Celery, redis_url: str, queue: str
) -> None:
    store = runtime_of(app).store  # opened (and its schema checked) before counting
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    asked = [RunRequest("t_chain", conf={"scale": i}) for i in range(40)]
    asked[7:7] = ["t_single", RunRequest("t_single", run_id="mine-1")]
    sa.event.listen(store._engine, "commit", count)
    try:
        runs = trigger_dags(runtime_of(app), asked)
    finally:
        sa.event.remove(store._engine, "commit", count)

    assert len(commits) == 2, len(commits)  # one insert (under INSERT_CHUNK runs), one dispatch
    assert [r.dag_id for r in runs] == ["t_chain"] * 7 + ["t_single"] * 2 + ["t_chain"] * 33
    chain = [r for r in runs if r.dag_id == "t_chain"]
    assert [r.conf for r in chain] == [{"scale": i} for i in range(40)]
    assert len({r.run_id for r in runs}) == len(runs)
    assert all(r.run_id.startswith("manual__") for r in runs if r.run_id != "mine-1")
    assert [r.logical_date for r in runs] == sorted(r.logical_date for r in runs)
    assert {r.trigger for r in runs} == {"manual"}
    # max_active_runs holds: the oldest run while the limit allows, the rest wait queued
    limit = runtime_of(app).dag("t_chain").max_active_runs
    assert 0 < limit < 40
    assert [r.state for r in chain] == [DagRunState.RUNNING] * limit + [DagRunState.QUEUED] * (
        40 - limit
    )
    # t_single allows one active run: the older is sent, the other waits queued
    single = [r for r in runs if r.dag_id == "t_single"]
    assert [r.state for r in single] == [DagRunState.RUNNING, DagRunState.QUEUED]
    assert single[1].run_id == "mine-1"
    assert sent_run_ids(redis_url, queue, "t_single.step") == [single[0].run_id]
    sent_chain = sent_run_ids(redis_url, queue, CHAIN_FIRST)
    assert sent_chain == [r.run_id for r in chain[:limit]]  # oldest first
    for r in runs:
        stored = store.get_dag_run(r.dag_id, r.run_id)
        assert stored is not None and stored.state == r.state


def test_the_same_run_id_twice_is_one_run_and_an_existing_one_is_returned_as_it_is(
    app: Celery, redis_url: str, queue: str
) -> None:
    first = trigger_dag(runtime_of(app), "t_chain", run_id="again-1", conf={"scale": 3})
    runs = trigger_dags(
        runtime_of(app),
        [
            RunRequest("t_chain", run_id="again-1", conf={"scale": 9}),
            RunRequest("t_chain", run_id="twice-1"),
            RunRequest("t_chain", run_id="twice-1"),
        ],
    )
    assert runs[0].run_id == "again-1" and runs[0].conf == {"scale": 3}
    assert runs[0].queued_at == first.queued_at
    assert runs[1] == runs[2] and runs[1].state == DagRunState.RUNNING
    sent = sent_run_ids(redis_url, queue, CHAIN_FIRST)
    assert sorted(sent) == ["again-1", "twice-1"]  # each sent once: the first by trigger_dag
    assert len(runtime_of(app).store.list_dag_runs("t_chain", limit=10)) == 2


@pytest.mark.parametrize(
    ("bad", "error", "said"),
    [
        (RunRequest("no_such_dag"), DagNotFoundError, "no_such_dag"),
        (RunRequest("t_chain", conf={"scael": 2}), ConfError, 'did you mean "scale"'),
        (RunRequest("t_chain", conf={"scale": "2"}), ConfError, '"scale" must be'),
        (RunRequest("t_chain", run_id="scheduled__2026"), InvalidIdError, "the beat's"),
        (RunRequest("t_chain", conf={"scale": 1, "extra": object()}), ConfError, "extra"),
    ],
)
def test_a_bad_request_anywhere_in_the_batch_creates_nothing_and_names_the_request(
    app: Celery, redis_url: str, queue: str, bad: RunRequest, error: type[Exception], said: str
) -> None:
    asked: list[RunRequest | str] = ["t_chain", RunRequest("t_single"), bad, "t_chain"]
    with pytest.raises(error) as caught:
        trigger_dags(runtime_of(app), asked)
    assert said in str(caught.value)
    assert any("request 2 of the batch" in note for note in caught.value.__notes__)
    store = runtime_of(app).store
    assert store.list_dag_runs("t_chain", limit=10) == []
    assert store.list_dag_runs("t_single", limit=10) == []
    assert sent_run_ids(redis_url, queue, CHAIN_FIRST) == []


def test_a_conf_the_store_refuses_creates_nothing(app: Celery) -> None:
    # NaN is a float, as t_single's param asks, but strict JSON cannot hold it: the store
    # refuses it before its first insert, so the 600 good runs ahead of it are not created
    store = runtime_of(app).store
    many = [RunRequest("t_single", run_id=f"ok-{i}") for i in range(600)]  # two insert chunks
    many.append(RunRequest("t_single", run_id="bad", conf={"sleep": float("nan")}))
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        trigger_dags(runtime_of(app), many)
    assert store.list_dag_runs("t_single", limit=10) == []


@pytest.mark.parametrize("one", ["t_chain", RunRequest("t_chain")])
def test_one_request_instead_of_a_list_is_refused_before_anything_is_written(
    app: Celery, one: str | RunRequest
) -> None:
    with pytest.raises(TypeError, match="takes a list of requests"):
        trigger_dags(runtime_of(app), one)  # type: ignore[arg-type]
    assert runtime_of(app).store.list_dag_runs("t_chain", limit=10) == []


def test_an_empty_batch_writes_and_sends_nothing(app: Celery, redis_url: str, queue: str) -> None:
    assert trigger_dags(runtime_of(app), []) == []
    assert sent_run_ids(redis_url, queue, CHAIN_FIRST) == []


def test_a_broker_lost_leaves_every_run_not_sent_queued_and_the_same_batch_sends_them(
    redis_url: str, postgres_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigger_module, "SEND_CHUNK", 5)  # t_chain's 16 slots: four chunks
    down = make_app(f"redis://127.0.0.1:{free_port()}/0", postgres_url, queue)
    asked = [RunRequest("t_chain", run_id=f"lost-{i:02d}") for i in range(20)]
    try:
        with pytest.raises(BrokerUnavailableError):
            trigger_dags(runtime_of(down), asked)
        store = runtime_of(down).store
        states = {r.run_id: r.state for r in store.list_dag_runs("t_chain", limit=100)}
        assert states == {f"lost-{i:02d}": DagRunState.QUEUED for i in range(20)}
    finally:
        down.close()

    up = make_app(redis_url, postgres_url, queue)
    try:
        runs = trigger_dags(
            runtime_of(up), asked
        )  # the broker back: the same batch sends them, once
    finally:
        up.close()
    limit = runtime_of(up).dag("t_chain").max_active_runs
    assert [r.state for r in runs] == [DagRunState.RUNNING] * limit + [DagRunState.QUEUED] * (
        20 - limit
    )
    assert sent_run_ids(redis_url, queue, CHAIN_FIRST) == [r.run_id for r in runs[:limit]]
