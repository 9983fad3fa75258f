"""Plain Celery tasks on beatflow's workers (BEATFLOW_IMPORTS) and durable dedupe for them
(base=beatflow.Idempotent): a real worker, Redis and PostgreSQL."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs, services
from tests.cluster import Cluster, own_cluster

pytestmark = pytest.mark.slow

BEATFLOW = [sys.executable, "-c", "import sys; from beatflow.cli import main; sys.exit(main())"]
PLAIN_DAGS = Path(__file__).resolve().parent / "plain_dags"


@pytest.fixture(scope="module")
def plain(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("plain")
    env = {"BEATFLOW_IMPORTS": "billing"}
    with own_cluster(redis_server, postgres_server, tmp, dags=PLAIN_DAGS, env=env) as c:
        yield c


def _call(c: Cluster, name: str, *args: object, task_id: str | None = None) -> object:
    result = c.app.tasks[name].apply_async(args, task_id=task_id)
    return result.get(timeout=60, propagate=False)


def test_the_worker_registers_plain_tasks_under_their_own_names_next_to_dag_tasks(
    plain: Cluster,
) -> None:
    replies = plain.app.control.inspect(timeout=5).registered() or {}
    names = {n for tasks in replies.values() for n in tasks}
    assert {"billing.add", "billing.send_invoice", "p_dag.hello"} <= names
    assert not any(n.startswith("beatflow_dags.billing") for n in names)  # not a DAG module


def test_a_plain_task_runs_under_beatflows_safety_settings(plain: Cluster) -> None:
    assert _call(plain, "billing.add", 2, 3) == 5
    assert _call(plain, "billing.safety") == {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "accept_content": ["json"],
        "serializer": "json",
        "app": "beatflow",
    }


def test_delay_works_from_a_process_that_uses_the_beatflow_app(plain: Cluster) -> None:
    code = (
        "import beatflow; beatflow.celery\n"  # builds the app and makes it current
        "from billing import add\n"
        "print(add.delay(20, 22).get(timeout=60))\n"
    )
    env = procs.beatflow_env({k: v for k, v in plain.env.items() if k != "BEATFLOW_TEST_MARKS"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "42"


def test_a_second_call_with_the_same_dedupe_key_returns_the_stored_result(
    plain: Cluster,
) -> None:
    first = _call(plain, "billing.send_invoice", "A1", 5)
    second = _call(plain, "billing.send_invoice", "A1", 5)
    assert first == second == "sent A1 for 5"
    assert plain.count("invoice-A1") == 1


def test_a_redelivered_message_runs_the_body_once(plain: Cluster) -> None:
    task_id = str(uuid.uuid4())
    assert _call(plain, "billing.send_invoice", "B2", 7, task_id=task_id) == "sent B2 for 7"
    # the same message again, as Redis gives it back after a worker died before its ack
    plain.app.tasks["billing.send_invoice"].apply_async(("B2", 7), task_id=task_id)
    done = re.compile(rf"billing\.send_invoice\[{task_id}\] (succeeded|raised)")
    procs.wait_for(
        lambda: len(done.findall(plain.log())) == 2,
        timeout=60,
        message="the worker to finish the second delivery",
    )
    assert [m.group(1) for m in done.finditer(plain.log())] == ["succeeded", "succeeded"]
    assert plain.count("invoice-B2") == 1


def test_failures_follow_the_tasks_retry_policy_and_a_failed_key_runs_again(
    plain: Cluster,
) -> None:
    assert _call(plain, "billing.flaky", "f1") == 2  # one retry, then success
    row = plain.store.get_task_run("flaky:f1")
    assert row is not None and row.state == "success" and row.try_number == 2
    failed = _call(plain, "billing.doomed", "d1")
    assert isinstance(failed, ValueError)
    row = plain.store.get_task_run("doomed:d1")
    assert row is not None and row.state == "failed" and "doomed d1" in (row.error or "")
    assert isinstance(_call(plain, "billing.doomed", "d1"), ValueError)
    assert plain.count("doomed-d1") == 2  # a key that failed for good is tried again


def test_the_tasks_command_lists_the_dedupe_rows(plain: Cluster) -> None:
    _call(plain, "billing.send_invoice", "C3", 1)
    env = procs.beatflow_env({k: v for k, v in plain.env.items() if k != "BEATFLOW_TEST_MARKS"})
    out = subprocess.run(
        [*BEATFLOW, "tasks", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["dedupe_key"]: r for r in json.loads(out.stdout)}
    assert rows["invoice:C3"]["state"] == "success"
    assert rows["invoice:C3"]["task"] == "billing.send_invoice"
    assert rows["invoice:C3"]["result"] == "sent C3 for 1"


def test_two_concurrent_calls_with_one_key_run_the_body_once(plain: Cluster) -> None:
    task = plain.app.tasks["billing.slow_invoice"]
    first, second = task.delay("S1"), task.delay("S1")  # the worker runs both at once
    assert first.get(timeout=60) == second.get(timeout=60) == "done S1"
    assert plain.count("slow-S1") == 1


def test_a_chain_next_to_a_fan_out_and_back_in_finishes(plain: Cluster) -> None:
    final, tasks = plain.run("p_shape", timeout=60)
    assert final.state == "failed"
    assert {k: t.state for k, t in tasks.items()} == {
        "first": "success",
        "then": "success",
        "broken": "failed",
        "fine": "success",
        "join": "success",
        "strict": "upstream_failed",
    }


def test_a_dag_task_can_send_plain_tasks_and_wait_on_their_results(plain: Cluster) -> None:
    # beatflow's own canvas registers no result waits; the user's code in a task still does
    final, tasks = plain.run("p_waits", timeout=60)
    assert final.state == "success", tasks
    assert tasks["waits_on_plain_tasks"].result == [0, 2, 4]
