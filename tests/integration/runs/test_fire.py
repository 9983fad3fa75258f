"""A worker's side of the beat's fires (``beatflow.fire_schedules``): each tick's run exists once,
every DAG of the batch is dispatched under its own max_active_runs, a paused DAG's runs wait
queued, a DAG this worker has not loaded is retried alone, and a stale leader's fire is refused.
The fire task's body is called in process with a stand-in for the Celery task."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from celery import Celery

from beatflow.dag.model import DAG
from beatflow.runs import trigger_dag
from beatflow.runs.fire import create_scheduled_run, fire_batch, scheduled_run_id
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests import services
from tests.events import captured_events
from tests.integration.runs.conftest import make_app
from tests.procs import wait_for

TICK = datetime(2026, 5, 1, 6, tzinfo=UTC)


class Retried(Exception):
    def __init__(self, args: list[Any], countdown: float) -> None:
        super().__init__("retry")
        self.retry_args = args
        self.countdown = countdown


@dataclass
class Request:
    retries: int = 0


@dataclass
class FireTask:
    """What fire_batch uses of its Celery task: the app, the retry count, retry()."""

    app: Celery
    request: Request = field(default_factory=Request)

    def retry(self, *, args: list[Any] | None = None, countdown: float = 0, **_: Any) -> Retried:
        return Retried(args or [], countdown)


def sent(redis_url: str, queue: str, dag_id: str) -> list[str]:
    """Run ids of the messages of ``dag_id``'s tasks waiting in ``queue``."""
    out = []
    for raw in redis.Redis.from_url(redis_url).lrange(queue, 0, -1):
        message = json.loads(raw)
        if str(message["headers"].get("task", "")).startswith(f"{dag_id}."):
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            out.append(args[0])
    return sorted(set(out))


def fire(dag_id: str, tick: datetime) -> list[str]:
    return [dag_id, tick.isoformat(), "scheduled"]


def test_a_batch_dispatches_each_dag_under_its_limit_and_keeps_paused_and_unknown_dags_queued(
    app: Celery, redis_url: str, queue: str
) -> None:
    runtime = runtime_of(app)
    store = runtime.store
    later = TICK + timedelta(hours=1)
    # the beat created the first tick's runs; the others are missing (an older beat)
    create_scheduled_run(store, runtime.dag("t_single"), TICK, "scheduled", 1)
    create_scheduled_run(store, runtime.dag("t_chord"), TICK, "scheduled", 1)
    store.set_paused("t_chord", True)
    fires = [
        fire("t_single", TICK),
        fire("t_chain", TICK),
        fire("not_loaded_here", TICK),
        fire("t_chord", TICK),
        fire("t_single", later),
    ]
    with pytest.raises(Retried) as retried:
        fire_batch(FireTask(app), fires, 1)  # type: ignore[arg-type]
    assert retried.value.retry_args == [[fire("not_loaded_here", TICK)], 1]

    def state(dag_id: str, tick: datetime) -> str | None:
        run = store.get_dag_run(dag_id, scheduled_run_id(tick))
        return None if run is None else run.state

    # t_single allows one active run: the oldest tick runs, the next waits queued
    assert (state("t_single", TICK), state("t_single", later)) == ("running", "queued")
    assert sent(redis_url, queue, "t_single") == [scheduled_run_id(TICK)]
    assert state("t_chain", TICK) == DagRunState.RUNNING  # created here, then dispatched
    assert sent(redis_url, queue, "t_chain") == [scheduled_run_id(TICK)]
    assert state("t_chord", TICK) == DagRunState.QUEUED  # paused: waits, nothing sent
    assert sent(redis_url, queue, "t_chord") == []
    assert store.get_dag_run("not_loaded_here", scheduled_run_id(TICK)) is None

    # the same batch again (a redelivered fire): no second run, nothing sent twice
    with pytest.raises(Retried):
        fire_batch(FireTask(app), fires, 1)  # type: ignore[arg-type]
    assert len(store.list_dag_runs("t_single")) == 2
    assert sent(redis_url, queue, "t_single") == [scheduled_run_id(TICK)]
    assert len(store.list_dag_runs("t_chain")) == 1


def test_a_fire_from_an_older_leader_epoch_is_refused_whole(app: Celery, redis_url: str) -> None:
    store = runtime_of(app).store
    store.raise_epoch_floor(5)
    assert fire_batch(FireTask(app), [fire("t_chain", TICK)], 4) == 0  # type: ignore[arg-type]
    assert store.get_dag_run("t_chain", scheduled_run_id(TICK)) is None


def test_a_dag_whose_fire_is_malformed_costs_the_other_dags_nothing(
    app: Celery, redis_url: str, queue: str
) -> None:
    store = runtime_of(app).store
    fires = [["t_single", "not a date", "scheduled"], fire("t_chain", TICK)]
    assert fire_batch(FireTask(app), fires, 1) == 1  # type: ignore[arg-type]
    assert sent(redis_url, queue, "t_chain") == [scheduled_run_id(TICK)]
    assert store.list_dag_runs("t_single") == []


def test_a_dag_whose_params_raise_costs_the_other_dags_of_the_batch_nothing(
    app: Celery, redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolve = DAG.resolve_conf

    def broken(self: DAG, conf: Any) -> dict[str, Any]:
        if self.dag_id == "t_single":
            raise RuntimeError("a param default that raises")
        return resolve(self, conf)

    monkeypatch.setattr(DAG, "resolve_conf", broken)
    store = runtime_of(app).store
    fires = [fire("t_single", TICK), fire("t_chain", TICK)]  # neither run exists yet
    assert fire_batch(FireTask(app), fires, 1) == 1  # type: ignore[arg-type]
    assert sent(redis_url, queue, "t_chain") == [scheduled_run_id(TICK)]
    assert store.list_dag_runs("t_single") == []


def test_a_batchs_runs_send_their_task_sent_events_in_one_message(
    app: Celery, redis_url: str, queue: str
) -> None:
    # Flower and celery-exporter see a task-sent event for every task a fire batch sends, a
    # chord's header too, and they come in one task.multi message: before, one message each
    fires = [fire("t_single", TICK), fire("t_chain", TICK), fire("t_chord", TICK)]
    with captured_events(app) as captured:
        assert fire_batch(FireTask(app), fires, 1) == 3  # type: ignore[arg-type]
        tasks = {
            json.loads(raw)["headers"]["id"]
            for raw in redis.Redis.from_url(redis_url).lrange(queue, 0, -1)
        }
        assert len(tasks) >= 4  # t_single's, t_chain's first, t_chord's header (two or more)
        wait_for(
            lambda: {e["uuid"] for e in captured.of_type("task-sent")} >= tasks,
            30,
            message="a task-sent event for every task sent",
        )
    sent_events = [e for e in captured.of_type("task-sent") if e["uuid"] in tasks]
    assert len(sent_events) == len(tasks)
    assert all(e["hostname"] and e["queue"] == queue and e["clock"] for e in sent_events)
    assert [len(m) for m in captured.messages_carrying(tasks)] == [len(tasks)]  # one message


@pytest.fixture
def own_broker_app(
    request: pytest.FixtureRequest,
    own_redis: services.OwnedRedis,
    redis_url: str,
    postgres_url: str,
    queue: str,
) -> Iterator[Celery]:
    """An app whose broker is a Redis server of the test's own (its result backend, where a
    chord counts its parts, another), warmed by a first send (so its producer has connected):
    to the queue, so that it is declared, unless the test is parametrised with False."""
    made = make_app(own_redis.url, postgres_url, queue, BEATFLOW_RESULT_BACKEND_URL=redis_url)
    declared = getattr(request, "param", True)
    made.send_task("warm.up", queue=queue if declared else f"{queue}-other", ignore_result=True)
    yield made
    made.close()


@contextlib.contextmanager
def broker_writes(port: int) -> Iterator[list[int]]:
    """The writes redis-py makes to the sockets of the Redis on ``port`` in the block (a
    pipeline is one write), as the number of commands each carried."""
    writes: list[int] = []
    write = redis.connection.AbstractConnection.send_packed_command

    def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        if getattr(conn, "port", None) == port:
            writes.append(len(command) if isinstance(command, list) else 1)
        write(conn, command, check_health)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
        yield writes


def test_a_fire_batch_reaches_the_broker_in_one_round_trip(
    own_broker_app: Celery, own_redis: services.OwnedRedis, queue: str
) -> None:
    # ten runs, each a chord's three header messages, and their task-sent events: before, one
    # LPUSH awaited after another (31 writes to the broker, each waiting for its answer); now
    # one pipeline
    ticks = [TICK + timedelta(hours=h) for h in range(10)]
    fires = [fire("t_chain", t) for t in ticks]
    with broker_writes(own_redis.port) as writes:
        assert fire_batch(FireTask(own_broker_app), fires, 1) == 1  # type: ignore[arg-type]
    assert sent(own_redis.url, queue, "t_chain") == sorted(scheduled_run_id(t) for t in ticks)
    assert len(writes) == 1, f"{len(writes)} writes to the broker for one fire batch"


def test_a_triggered_run_reaches_the_broker_in_one_round_trip(
    own_broker_app: Celery, own_redis: services.OwnedRedis, queue: str
) -> None:
    # a chord's three header messages and their task-sent events: before, six writes
    with broker_writes(own_redis.port) as writes:
        run = trigger_dag(runtime_of(own_broker_app), "t_chain")
    assert sent(own_redis.url, queue, "t_chain") == [run.run_id]
    assert len(writes) == 1, f"{len(writes)} writes to the broker for one trigger"


@pytest.mark.parametrize(
    "own_broker_app", [True, False], indirect=True, ids=["queue-declared", "queue-new"]
)
def test_a_broker_lost_while_a_fire_batch_is_sent_leaves_its_runs_queued_and_retries_it(
    own_broker_app: Celery, own_redis: services.OwnedRedis, queue: str
) -> None:
    # the producer connected, then the broker dies. Queue declared: the batch's messages are
    # buffered and its one send fails, so which of them arrived is unknown; queue new: the
    # first send's declaration fails. Either way every run goes back to queued and the fire is
    # retried whole (before: a failed declaration left the runs to the reconciler); once the
    # broker is back the retry sends each run once
    store = runtime_of(own_broker_app).store
    ticks = [TICK + timedelta(hours=h) for h in range(3)]
    fires = [fire("t_chain", t) for t in ticks]
    own_redis.kill()
    with pytest.raises(Retried) as retried:
        fire_batch(FireTask(own_broker_app), fires, 1)  # type: ignore[arg-type]
    assert retried.value.retry_args == [fires, 1]
    assert {store.get_dag_run("t_chain", scheduled_run_id(t)).state for t in ticks} == {  # type: ignore[union-attr]
        DagRunState.QUEUED
    }
    own_redis.start()
    assert fire_batch(FireTask(own_broker_app), retried.value.retry_args[0], 1) == 1  # type: ignore[arg-type]
    assert {store.get_dag_run("t_chain", scheduled_run_id(t)).state for t in ticks} == {  # type: ignore[union-attr]
        DagRunState.RUNNING
    }
    assert sent(own_redis.url, queue, "t_chain") == sorted(scheduled_run_id(t) for t in ticks)
    tasks: dict[str, list[str]] = {}  # each run's messages, by task name
    for raw in redis.Redis.from_url(own_redis.url).lrange(queue, 0, -1):
        message = json.loads(raw)
        if not message["headers"]["task"].startswith("t_chain."):
            continue
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        tasks.setdefault(args[0], []).append(message["headers"]["task"])
    assert all(len(names) == len(set(names)) for names in tasks.values()), tasks  # once each
