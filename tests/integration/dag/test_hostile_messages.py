"""Hostile messages on a worker's queue, published raw with kombu: malformed JSON, a refused
content type, pickle, an unknown task, missing headers, wrong argument types, an oversized
argument, a run that does not exist. Each is refused or dropped with a log line, none runs user
code, the worker process survives, nothing is left unacked, and a DAG run sent after them all
still completes (no other work lost)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import kombu
import pytest
import redis

from beatflow.states import DagRunState
from tests.cluster import Cluster
from tests.procs import wait_for

NODE_TASK = "t_effect.effect"


def headers_for(task: str, task_id: str) -> dict[str, Any]:
    return {
        "lang": "py",
        "task": task,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "retries": 0,
        "eta": None,
        "expires": None,
        "timelimit": [None, None],
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "hostile",
    }


def embed() -> dict[str, Any]:
    return {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def publish(cluster: Cluster, body: Any, *, headers: dict[str, Any] | None,
            content_type: str = "application/json", raw: bool = False) -> None:  # fmt: skip
    queue = cluster.env["BEATFLOW_QUEUES"]
    with kombu.Connection(cluster.env["BEATFLOW_BROKER_URL"]) as conn:
        producer = conn.Producer()
        if raw:
            producer.publish(
                body,
                routing_key=queue,
                exchange="",
                content_type=content_type,
                content_encoding="utf-8",
                headers=headers or {},
                delivery_mode=2,
            )
        else:
            producer.publish(
                body, routing_key=queue, exchange="", serializer="json", headers=headers or {}
            )


def hostile_cases() -> list[tuple[str, dict[str, Any], str]]:
    """(case id, publish kwargs, the worker log line that says it was refused)."""
    run_missing = f"no DAG run t_effect/missing-{uuid.uuid4().hex[:6]}"
    return [
        (
            "malformed-json",
            {"body": b'[["x"], {}, {"callbacks": ', "headers": headers_for(NODE_TASK, "h1"),
             "raw": True},
            "Can't decode message body",
        ),
        (
            "yaml-content-type",
            {"body": b"- a\n- b\n", "headers": headers_for(NODE_TASK, "h2"),
             "content_type": "application/x-yaml", "raw": True},
            "Refusing to deserialize untrusted content of type yaml",
        ),
        (
            "pickle",
            {"body": b"\x80\x04K\x01.", "headers": headers_for(NODE_TASK, "h3"),
             "content_type": "application/x-python-serialize", "raw": True},
            "Refusing to deserialize untrusted content of type pickle",
        ),
        (
            "unknown-task",
            {"body": [[], {}, embed()], "headers": headers_for("no_such.task", "h4")},
            "Received unregistered task of type 'no_such.task'",
        ),
        (
            "missing-headers",
            {"body": {"not": "a task"}, "headers": None},
            "Received invalid task message",
        ),
        (
            "wrong-argument-types",
            {"body": [[12345, "x"], {}, embed()], "headers": headers_for(NODE_TASK, "h6")},
            "malformed message for t_effect.effect dropped: invalid run id '12345'",
        ),
        (
            "oversized-argument",
            {"body": [["r" * 2_000_000], {}, embed()], "headers": headers_for(NODE_TASK, "h7")},
            "malformed message for t_effect.effect dropped: invalid run id 'rrrr",
        ),
        (
            "run-that-does-not-exist",
            {"body": [[run_missing.split("/")[1]], {}, embed()],
             "headers": headers_for(NODE_TASK, "h8")},
            f"{run_missing} in the results database; message dropped",
        ),
    ]  # fmt: skip


@pytest.mark.slow
def test_hostile_messages_are_refused_and_the_worker_keeps_serving(
    cluster: Cluster,
) -> None:
    worker = cluster.workers[0]
    pid = worker.pid
    marks_before = cluster.count(f"start-{uuid.uuid4().hex}")  # nothing by that name: 0
    for case, kwargs, expected in hostile_cases():
        publish(cluster, **kwargs)
        wait_for(
            lambda expected=expected: expected in cluster.log(),
            timeout=60,
            message=f"the worker's word on the {case} message",
        )
    log = cluster.log()
    assert "r" * 10_000 not in log  # an oversized argument is never logged whole
    # The worker survived them all and nothing of them waits for redelivery.
    assert worker.popen is not None and worker.popen.poll() is None and worker.pid == pid
    client = redis.Redis.from_url(cluster.env["BEATFLOW_BROKER_URL"])
    try:
        wait_for(lambda: client.hlen("unacked") == 0, timeout=30, message="no unacked message")
        assert client.llen(cluster.env["BEATFLOW_QUEUES"]) == 0
    finally:
        client.close()
    # No hostile message created a task run, and real work still flows.
    assert cluster.count("start-missing") == marks_before == 0
    run, tasks = cluster.run("t_effect", timeout=90)
    assert run.state == DagRunState.SUCCESS, json.dumps({k: v.state for k, v in tasks.items()})
