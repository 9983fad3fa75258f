"""The node wrapper on a real worker, its edge cases: a result that looks like a map expansion,
a dedupe key shared across runs, an error text PostgreSQL refuses, a worker whose lease was taken
over, and a message for a task this worker does not have (deploy skew)."""

from __future__ import annotations

import re
import shutil

import pytest
import sqlalchemy as sa

from beatflow.dag.compile import MAP_CHUNK_TASK, SEGMENT_TASK, task_name
from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.store.models import task_runs
from tests import procs
from tests.cluster import DAGS
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_a_result_that_looks_like_a_map_expansion_is_passed_on_as_it_is(cluster):
    final, tasks = cluster.run("t_map_marker")
    assert final.state == "success"
    assert tasks["looks_like_a_map"].map_count is None
    assert tasks["receives"].result == {"got": {"map_count": 3}}


def test_a_dedupe_key_shared_across_runs_does_the_side_effect_once_and_both_runs_succeed(cluster):
    conf = {"customer": "acme"}
    first, tasks1 = cluster.run("t_customer", conf=conf)
    assert first.state == "success", tasks1
    second, tasks2 = cluster.run("t_customer", conf=conf)
    assert second.state == "success", tasks2
    assert cluster.count("charge-acme") == 1  # the side effect happened once, in run 1
    charged = f"charged acme in {first.run_id}"
    assert tasks2["charge"].state == "success" and tasks2["charge"].result == charged
    assert tasks2["charge"].deduped_from == first.run_id
    assert tasks2["receipt"].result == f"receipt: {charged}"  # downstream ran in run 2
    other, _ = cluster.run("t_customer", conf={"customer": "globex"})
    assert other.state == "success" and cluster.count("charge-globex") == 1


def test_an_error_text_with_a_nul_byte_still_fails_the_task_run_and_ends_the_dag_run(cluster):
    final, tasks = cluster.run("t_nul")
    assert final.state == "failed"
    assert tasks["nul_error"].state == "failed"
    assert "bad byte \\x00 here" in (tasks["nul_error"].error or "")


def test_a_worker_whose_lease_was_taken_over_stops_writes_nothing_and_continues_nothing(cluster):
    record = trigger_dag(runtime_of(cluster.app), "t_stale", conf={"fail": True})
    run_id = record.run_id
    wait_for(lambda: cluster.count(f"held-start-{run_id}") == 1, message="the task to start")
    key = f"t_stale/{run_id}/held"
    # another worker takes the task run over (what a claim after an expired lease does)
    with cluster.store._write("taking over") as conn:  # the takeover, by hand
        taken = conn.execute(
            sa.update(task_runs)
            .where(task_runs.c.dedupe_key == key, task_runs.c.state == "running")
            .values(lease_token="successor", worker="successor", try_number=2)
        ).rowcount
    assert taken == 1
    (cluster.marks / f"release-{run_id}").write_text("")  # the stale worker's task now fails
    wait_for(
        lambda: f"task run {key}: this worker's lease was taken over; stopping" in cluster.log(),
        message="the stale worker to stop",
    )
    row = cluster.store.get_task_run(key)
    assert (row.state, row.worker, row.error) == ("running", "successor", None)  # untouched
    assert [d for d in cluster.store.list_dead_letters("t_stale") if d.run_id == run_id] == []
    assert "after_held" not in cluster.tasks("t_stale", run_id)  # the canvas did not go on
    # the successor finishes; the run's downstream is its to run (here: by the test)
    assert cluster.store.finish_task_run(key, "successor", state="success", result=1)


def test_a_message_for_a_task_this_worker_does_not_have_fails_its_task_run(cluster, tmp_path):
    rolled = tmp_path / "rolled-dags"
    shutil.copytree(DAGS, rolled, ignore=shutil.ignore_patterns("__pycache__"))
    # the rolled worker's version of t_effect has no task "downstream"
    effects = rolled / "effects.py"
    effects.write_text(
        effects.read_text().replace(
            'with DAG("t_effect", params={"sleep": 0.0}):\n    downstream(effect())',
            'with DAG("t_effect", params={"sleep": 0.0}):\n    effect()',
        )
    )
    old = cluster.workers[:]
    env = {**cluster.env, "BEATFLOW_DAGS_FOLDER": str(rolled)}
    rolled_worker = procs.celery_worker(cluster.tmp, env, queues=env["BEATFLOW_QUEUES"]).start()
    cluster.workers.append(rolled_worker)
    procs.wait_worker_ready(cluster.app, rolled_worker)
    for w in old:
        w.stop()
        cluster.workers.remove(w)
    try:
        record = trigger_dag(runtime_of(cluster.app), "t_effect")
        wait_for(
            lambda: (
                (t := cluster.tasks("t_effect", record.run_id).get("downstream")) is not None
                and t.state == "failed"
            ),
            timeout=60,
            message="the unknown task's run to be failed",
        )
        down = cluster.tasks("t_effect", record.run_id)["downstream"]
        assert "not registered on this worker" in (down.error or "")
        assert "deploy skew" in (down.error or "")
        # failed for good, so a dead letter (written with the row), replayable once rolled
        letters = [
            d for d in cluster.store.list_dead_letters("t_effect") if d.run_id == record.run_id
        ]
        assert [(d.task_id, d.dedupe_key) for d in letters] == [("downstream", down.dedupe_key)]
    finally:
        rolled_worker.stop()
        cluster.workers.remove(rolled_worker)
        cluster.start_worker()


def test_a_segment_or_map_chunk_this_worker_cannot_expand_fails_its_task_runs(cluster):
    # a run whose plan changed under it: a segment path and a map chunk of a task that no
    # longer exist on this worker (what a rolled deploy can leave in the queue)
    run_id = "skewed-plan"
    cluster.store.create_dag_run("t_effect", run_id)
    cluster.app.send_task(SEGMENT_TASK, args=("t_effect", run_id, "7.7.7"))
    cluster.app.send_task(MAP_CHUNK_TASK, args=("t_effect", "gone", run_id, 0, 2))

    def failed() -> dict[str, str]:
        return {k: t.state for k, t in cluster.tasks("t_effect", run_id).items()}

    wait_for(
        lambda: failed() == {k: "failed" for k in ("effect", "downstream", "gone[0]", "gone[1]")},
        timeout=60,
        message="the task runs of the unexpandable parts to be failed",
    )
    errors = [t.error or "" for t in cluster.tasks("t_effect", run_id).values()]
    assert all("cannot be expanded" in e and "deploy skew" in e for e in errors), errors
    letters = [d for d in cluster.store.list_dead_letters("t_effect") if d.run_id == run_id]
    assert sorted(d.dedupe_key for d in letters) == sorted(
        t.dedupe_key for t in cluster.tasks("t_effect", run_id).values()
    )  # every task run failed for good is a dead letter


def _received(cluster, prefix: str) -> int:
    """How many messages of tasks named ``prefix...`` the workers received (Celery logs each)."""
    return len(re.findall(rf"Task {re.escape(prefix)}[\w.]*\[[-0-9a-f]+\] received", cluster.log()))


def test_a_chains_last_task_closes_its_run_in_process_without_a_closing_hop(cluster):
    before = _received(cluster, "beatflow.finish_run")
    final, tasks = cluster.run("t_chain")
    assert final.state == "success" and final.ended_at is not None
    assert all(t.state == "success" for t in tasks.values()), tasks
    assert _received(cluster, "t_chain.") >= len(tasks)  # the log does show received tasks
    assert _received(cluster, "beatflow.finish_run") == before  # no separate closing hop


def test_a_closing_task_that_retries_closes_the_run_only_when_final(cluster):
    final, tasks = cluster.run("t_retry")
    assert final.state == "success"
    assert tasks["flaky"].try_number == 3  # two failed tries did not close the run early
    assert final.ended_at is not None and final.ended_at >= (
        tasks["flaky"].ended_at or final.ended_at
    )


def test_a_run_ends_in_the_same_write_as_its_closing_tasks_success(cluster):
    # the closing task read every task run of this small run: its success and the run's end
    # are one statement, so the run ended when its last task did, to the microsecond
    final, tasks = cluster.run("t_effect")
    assert final.state == "success", tasks
    assert final.ended_at is not None
    assert final.ended_at == tasks["downstream"].ended_at
    assert tasks["effect"].ended_at is not None and tasks["effect"].ended_at < final.ended_at


def test_a_closing_task_that_fails_for_good_closes_its_run_failed(cluster):
    # t_bad_key's sink runs by all_done after bad_key fails for good; then, a failing sink
    final, tasks = cluster.run("t_bad_key")
    assert final.state == "failed", tasks
    assert tasks["bad_key"].state == "failed"
    assert tasks["after_all_done"].state == "success"


def test_a_mapped_instance_past_the_end_of_its_list_fails_with_the_reason(cluster):
    """An instance message no expansion sent (forged, or from a changed DAG): its index is past
    the end of the list its task maps over. It fails clearly and runs nothing."""
    store, run_id = cluster.store, "r-past-the-end"
    store.create_dag_run("t_map", run_id)
    assert [r.run_id for r in store.start_queued_dag_runs("t_map", 16)] == [run_id]
    for task_id, outcome in (("numbers", {"result": [1, 2, 3]}), ("square", {"map_count": 3})):
        key = f"t_map/{run_id}/{task_id}"
        claim = store.claim_task_run(key, dag_id="t_map", run_id=run_id, task_id=task_id)
        assert store.finish_task_run(key, claim.token, state="success", **outcome)
    cluster.app.send_task(task_name("t_map", "square"), args=[run_id], kwargs={"map_index": 7})
    key = f"t_map/{run_id}/square[7]"
    wait_for(
        lambda: (row := store.get_task_run(key)) is not None and row.state == "failed",
        message="the instance past the end to fail",
    )
    row = store.get_task_run(key)
    assert row.error == 'map index 7 is past the end of the 3 items of "numbers"'
    assert row.result is None
