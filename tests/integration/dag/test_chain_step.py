"""A chain's next step, sent by the node wrapper once its task run's success is recorded
(``execution.canvas.send_chain_step``): the message and its task-sent event in one round trip,
then the request detached; a broker that cannot take them leaves the step to Celery's tracer."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery import Task as CeleryTask

from beatflow.app import create_app
from beatflow.dag.compile import FINISH_TASK
from beatflow.execution import canvas
from beatflow.settings import Settings
from tests.services._base import free_port


def _app(tmp_path: Path, broker: str) -> Celery:
    settings = Settings.from_env(
        {
            "BEATFLOW_BROKER_URL": broker,
            "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite",
            "BEATFLOW_DAGS_FOLDER": str(tmp_path),
        }
    )
    return create_app(settings, load_dags=False)


def _step(app: Celery, name: str) -> dict[str, Any]:
    return dict(app.signature(name, args=("r1", None), immutable=True))


@pytest.fixture
def running() -> Iterator[list[CeleryTask]]:
    """Tasks whose request a test pushed, popped again when it ends."""
    pushed: list[CeleryTask] = []
    yield pushed
    for task in pushed:
        task.pop_request()


def _run_with(task: CeleryTask, pushed: list[CeleryTask], **request: Any) -> None:
    task.push_request(id="the-task", root_id="the-root", **request)
    pushed.append(task)


def test_the_next_step_is_sent_and_the_request_detached(tmp_path, redis_url, running):
    app = _app(tmp_path, redis_url)
    task = app.tasks[FINISH_TASK]  # any beatflow task: the request is what counts
    after, then = _step(app, "t_step.second"), _step(app, "t_step.third")
    _run_with(task, running, chain=[then, after])  # stored reversed: "second" comes next

    assert canvas.send_chain_step(task) is True

    assert task.request.chain is None and canvas.is_continued(task)  # the tracer sends nothing
    raw = redis.Redis.from_url(redis_url).lrange(app.conf.task_default_queue, 0, -1)
    assert len(raw) == 1
    message = json.loads(raw[0])
    assert message["headers"]["task"] == "t_step.second"
    assert message["headers"]["parent_id"] == "the-task"
    assert message["headers"]["root_id"] == "the-root"
    body = json.loads(base64.b64decode(message["body"]))
    assert body[2]["chain"] == json.loads(json.dumps([then]))  # the rest of the chain goes along


@pytest.mark.parametrize(
    "request_fields", [{"chain": None}, {"chord": {"task": "body"}}, {"is_eager": True}]
)
def test_a_task_with_no_plain_next_step_is_left_to_the_tracer(
    tmp_path, redis_url, running, request_fields
):
    app = _app(tmp_path, redis_url)
    task = app.tasks[FINISH_TASK]
    fields = {"chain": [_step(app, "t_step.next")], **request_fields}
    _run_with(task, running, **fields)

    assert canvas.send_chain_step(task) is False

    assert task.request.chain == fields["chain"] and not canvas.is_continued(task)
    assert redis.Redis.from_url(redis_url).llen(app.conf.task_default_queue) == 0


def test_a_step_the_broker_cannot_take_is_left_to_celerys_tracer(tmp_path, running):
    app = _app(tmp_path, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    task = app.tasks[FINISH_TASK]
    chain = [_step(app, "t_step.next")]
    _run_with(task, running, chain=chain)

    assert canvas.send_chain_step(task) is False

    # still attached: Celery's tracer sends the step after the task returns, with its own
    # publish retries, and records FAILURE if the broker stays away
    assert task.request.chain == chain and not canvas.is_continued(task)
