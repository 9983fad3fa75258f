"""The operator's verbs keep their promises, end to end through the CLI on a real worker and
PostgreSQL: a task with ``retries=2`` cleared or replayed runs up to three tries again (not
once), shown as ``cleared`` until it runs; marking a run closes its dead letters, so a replay of
an earlier letter is refused and the run stays as marked; and each verb's audit record is
written in the transaction of its change (the rows carry the same transaction id)."""

from __future__ import annotations

import json

import sqlalchemy as sa

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState, TaskRunState
from tests.cluster import Cluster
from tests.procs import wait_for

TRIES = 3  # flaky: retries=2


def xmin(c: Cluster, sql: str, **params: object) -> str:
    """The id of the transaction that last wrote the row ``sql`` selects (PostgreSQL)."""
    engine = sa.create_engine(c.env["BEATFLOW_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text(sql), params).scalar_one())
    finally:
        engine.dispose()


def audit_xmin(c: Cluster, run_id: str, action: str) -> str:
    return xmin(
        c,
        "SELECT xmin::text FROM audit_events WHERE run_id = :run_id AND action = :action "
        "ORDER BY id DESC LIMIT 1",
        run_id=run_id,
        action=action,
    )


def letter_xmin(c: Cluster, letter_id: int) -> str:
    return xmin(c, "SELECT xmin::text FROM dead_letters WHERE id = :id", id=letter_id)


def failed_run(c: Cluster, run_id: str) -> int:
    """A run of t_retried whose flaky task failed for good after its three tries; its letter."""
    final, tasks = c.run("t_retried", run_id=run_id, timeout=60)
    assert final.state == DagRunState.FAILED
    assert (tasks["flaky"].state, tasks["flaky"].try_number) == (TaskRunState.FAILED, TRIES)
    assert c.count(f"flaky-{run_id}") == TRIES
    [letter] = [d.id for d in c.store.list_dead_letters("t_retried") if d.run_id == run_id]
    return letter


def test_a_cleared_task_runs_its_full_retry_policy_again(c: Cluster) -> None:
    first = failed_run(c, "clear-retried")
    tasks = c.tasks("t_retried", "clear-retried")
    assert tasks["after_flaky"].state == TaskRunState.UPSTREAM_FAILED

    out = c.cli(
        "runs", "clear", "t_retried", "clear-retried", "--only-failed", "--actor", "alice",
        "--reason", "try again", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # the clear and its audit record are one transaction: the letter it closed carries its id
    assert audit_xmin(c, "clear-retried", "clear") == letter_xmin(c, first)
    final, tasks = c.wait("t_retried", "clear-retried", timeout=60)
    assert final.state == DagRunState.FAILED
    # three more tries (4, 5, 6), not one: retries=2 holds for the new round
    assert c.count("flaky-clear-retried") == 2 * TRIES, c.log_tail()
    flaky = tasks["flaky"]
    assert (flaky.try_number, flaky.tries_before, flaky.tries_since_clear) == (6, 3, 3)
    assert "not fixed yet (try 6)" in (flaky.error or "")
    letters = {d.id: d for d in c.store.list_dead_letters("t_retried", include_replayed=True)}
    newer = [d for d in letters.values() if d.run_id == "clear-retried" and d.id != first]
    assert len(newer) == 1 and newer[0].tries == TRIES and newer[0].is_open
    assert not letters[first].is_open
    assert letters[first].closed_reason == "cleared by alice: try again"


def test_a_cleared_task_shows_cleared_until_it_runs_and_its_downstream_no_try(
    c: Cluster,
) -> None:
    failed_run(c, "clear-shown")
    # the worker is stopped from claiming by a paused consumer: the clear's rows are read
    # before any worker can run them (the run is sent only once its rows are written)
    queue = c.env["BEATFLOW_QUEUES"]
    c.app.control.cancel_consumer(queue, reply=True, timeout=10)
    try:
        out = c.cli("runs", "clear", "t_retried", "clear-shown", "--only-failed", "--json")
        assert out.returncode == 0, out.stderr
        shown = json.loads(c.cli("runs", "show", "t_retried", "clear-shown", "--json").stdout)
        states = {
            t["task_id"]: (t["state"], t["try_number"], t["tries_before"]) for t in shown["tasks"]
        }
        assert states == {"flaky": ("cleared", 3, 3), "after_flaky": ("cleared", 0, 0)}
        text = c.cli("runs", "show", "t_retried", "clear-shown").stdout
        assert "up_for_retry" not in text and "try next 4" in text, text
        (c.marks / "fix-clear-shown").touch()  # the next try succeeds
    finally:
        c.app.control.add_consumer(queue, reply=True, timeout=10)
    final, tasks = c.wait("t_retried", "clear-shown", timeout=60)
    shown_tasks = [
        (t.task_id, t.state, t.try_number, t.tries_before, t.error) for t in tasks.values()
    ]
    assert final.state == DagRunState.SUCCESS, (shown_tasks, c.log_tail(6000))
    assert (tasks["flaky"].try_number, tasks["after_flaky"].try_number) == (4, 1)


def test_a_replayed_task_runs_its_full_retry_policy_again(c: Cluster) -> None:
    letter = failed_run(c, "replay-retried")
    out = c.cli(
        "dlq", "replay", str(letter), "--wait", "--timeout", "60", "--actor", "bob",
        "--reason", "after the fix",
    )  # fmt: skip
    assert out.returncode == 1, (out.stdout, out.stderr)  # not fixed: it fails again
    assert c.count("flaky-replay-retried") == 2 * TRIES, c.log_tail()
    flaky = c.tasks("t_retried", "replay-retried")["flaky"]
    assert (flaky.state, flaky.try_number, flaky.tries_since_clear) == ("failed", 6, 3)
    # the replay and its audit record are one transaction: the letter it stamped carries its id
    assert audit_xmin(c, "replay-retried", "replay") == letter_xmin(c, letter)
    [audit] = c.store.list_audit("t_retried", "replay-retried", action="replay")
    assert (audit.actor, audit.detail) == (
        "bob",
        {"reason": "after the fix", "dead_letter": letter},
    )


def test_a_mark_closes_the_letters_and_a_replay_of_an_earlier_one_is_refused(c: Cluster) -> None:
    first = failed_run(c, "mark-then-replay")
    out = c.cli("runs", "clear", "t_retried", "mark-then-replay", "--only-failed")
    assert out.returncode == 0, out.stderr
    final, _ = c.wait("t_retried", "mark-then-replay", timeout=60)
    assert final.state == DagRunState.FAILED  # a second letter
    [second] = [
        d.id
        for d in c.store.list_dead_letters("t_retried")
        if d.run_id == "mark-then-replay" and d.id != first
    ]
    out = c.cli(
        "runs", "mark", "t_retried", "mark-then-replay", "--state", "success",
        "--actor", "carol", "--reason", "done by hand",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # the mark and its audit record are one transaction: the letter it closed carries its id
    assert audit_xmin(c, "mark-then-replay", "mark") == letter_xmin(c, second)
    tries = c.count("flaky-mark-then-replay")

    for letter in (first, second):
        refused = c.cli("dlq", "replay", str(letter))
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr.startswith(f"error: dead letter {letter} is stale"), refused.stderr
    refused = c.cli("dlq", "replay", str(second))
    assert "marked success by carol: done by hand" in refused.stderr
    run = c.store.get_dag_run("t_retried", "mark-then-replay")
    assert run is not None and run.state == DagRunState.SUCCESS
    assert c.count("flaky-mark-then-replay") == tries  # nothing ran again
    assert c.store.list_audit("t_retried", "mark-then-replay", action="replay") == []
    listed = c.cli("dlq", "list", "t_retried", "--all").stdout
    assert "(stale: marked success by carol: done by hand)" in listed


def test_cancel_is_audited_in_the_transaction_of_its_change(c: Cluster) -> None:
    runtime = runtime_of(c.app)
    busy = trigger_dag(runtime, "t_single", run_id="cancel-busy", conf={"sleep": 120.0})
    waiting = trigger_dag(runtime, "t_single", run_id="cancel-waiting", conf={"sleep": 0.0})
    assert waiting.state == DagRunState.QUEUED  # max_active_runs=1
    try:
        out = c.cli("runs", "cancel", "t_single", "cancel-waiting", "--actor", "dan")
        assert out.returncode == 0, out.stderr
        run_xmin = xmin(c, "SELECT xmin::text FROM dag_runs WHERE run_id = 'cancel-waiting'")
        assert audit_xmin(c, "cancel-waiting", "cancel") == run_xmin
    finally:
        wait_for(lambda: c.count(f"step-{busy.run_id}") == 1, timeout=60, message="the step")
        c.cli("runs", "cancel", "t_single", busy.run_id, "--terminate")
