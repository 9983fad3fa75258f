"""The operator's verbs end to end, through the CLI, on a real worker: cancel (no further task
starts, running ones terminated, the slot freed at once), clear (a new try, the run ends
again), mark; each one in the audit table with who and why."""

from __future__ import annotations

import json
from pathlib import Path

from beatflow.runs import trigger_dag
from beatflow.runs.operator import mark_run
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState, TaskRunState
from tests.cluster import Cluster
from tests.consumed import assert_not_started, consumed
from tests.procs import wait_for


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_cancel_terminates_the_running_task_frees_the_slot_and_is_audited(c: Cluster) -> None:
    first = trigger_dag(runtime_of(c.app), "t_single", run_id="cancel-me", conf={"sleep": 120.0})
    waiting = trigger_dag(runtime_of(c.app), "t_single", run_id="next-in-line", conf={"sleep": 0.0})
    assert waiting.state == DagRunState.QUEUED  # max_active_runs=1
    wait_for(lambda: c.count(f"step-{first.run_id}") == 1, timeout=60, message="the step")
    pid = int((c.marks / f"pid-step-{first.run_id}").read_text())
    assert _alive(pid) and pid not in {w.pid for w in c.workers}  # a pool child, sleeping

    out = c.cli(
        "runs", "cancel", "t_single", "cancel-me", "--terminate", "--reason", "wrong input",
        "--actor", "alice", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["state"] == "cancelled" and "alice: wrong input" in shown["failure_reason"]
    # the task was killed (SIGTERM to its pool process), not left sleeping its 120 s out
    wait_for(
        lambda: not _alive(pid),
        timeout=60,
        message=f"the pool process {pid} running the cancelled task to be terminated",
    )
    # the slot went to the next run at once; it runs to the end
    final, _ = c.wait("t_single", "next-in-line", timeout=60)
    assert final.state == DagRunState.SUCCESS
    task = c.tasks("t_single", "cancel-me")["step"]
    assert task.state == TaskRunState.CANCELLED
    assert c.store.get_dag_run("t_single", "cancel-me").state == DagRunState.CANCELLED  # type: ignore[union-attr]
    [audit] = c.store.list_audit("t_single", "cancel-me")
    assert (audit.actor, audit.action, audit.detail["reason"]) == ("alice", "cancel", "wrong input")
    assert audit.detail["terminate"] is True

    again = c.cli("runs", "cancel", "t_single", "cancel-me")
    assert again.returncode == 1
    assert "cannot cancel run t_single/cancel-me (cancelled)" in again.stderr


def test_cancel_while_a_chord_runs_starts_no_further_task(c: Cluster) -> None:
    run = trigger_dag(runtime_of(c.app), "t_chord", run_id="cancel-chord", conf={"hold": 30.0})
    wait_for(lambda: c.count("part1-cancel-chord") and c.count("part2-cancel-chord"), timeout=60)
    out = c.cli("runs", "cancel", "t_chord", run.run_id, "--actor", "bob")
    assert out.returncode == 0, out.stderr
    assert "now cancelled" in out.stdout
    for n in (1, 2):  # the parts finish their functions, but cannot record it
        (c.marks / f"gate-cancel-chord-{n}").touch()
    wait_for(
        lambda: consumed(c, "t_chord.p1") + consumed(c, "t_chord.p2") >= 2,
        timeout=30,
        message="the parts' messages to be consumed",
    )
    # A late message for the join and the tail (a redelivered chord callback, a resume): the run
    # is over, so neither starts; each is waited for until a worker is done with it.
    for task_id in ("join", "tail"):
        name = f"t_chord.{task_id}"
        sent = c.app.send_task(name, args=[run.run_id, None], queue=c.env["BEATFLOW_QUEUES"])
        wait_for(
            lambda name=name, sent_id=sent.id: consumed(c, name, sent_id) == 1,
            timeout=30,
            message=f"the late {task_id} message to be consumed",
        )
    tasks = c.tasks("t_chord", run.run_id)
    assert tasks["p1"].state == tasks["p2"].state == TaskRunState.CANCELLED
    assert_not_started(c, "t_chord", run.run_id, "join", "tail")
    # nor recorded any decision about them (upstream_failed, skipped): the run ended as it was
    assert "join" not in tasks and "tail" not in tasks, {t: r.state for t, r in tasks.items()}
    assert c.count("join-cancel-chord") == 0 and c.count("tail-cancel-chord") == 0
    assert c.store.get_dag_run("t_chord", run.run_id).state == DagRunState.CANCELLED  # type: ignore[union-attr]


def test_clear_only_failed_runs_them_again_as_a_new_try_and_the_run_ends_again(
    c: Cluster,
) -> None:
    final, tasks = c.run("t_fixable", run_id="clear-me", timeout=60)
    assert final.state == DagRunState.FAILED
    assert tasks["after_fix"].state == TaskRunState.UPSTREAM_FAILED
    tries_before = tasks["fixable"].try_number
    (c.marks / "fix-clear-me").touch()

    out = c.cli("runs", "clear", "t_fixable", "clear-me", "--only-failed", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] in ("queued", "running")
    final, tasks = c.wait("t_fixable", "clear-me", timeout=60)
    assert final.state == DagRunState.SUCCESS
    assert tasks["fixable"].try_number == tries_before + 1
    assert tasks["after_fix"].result == "after fixed"
    assert [a.action for a in c.store.list_audit("t_fixable", "clear-me")] == ["clear"]


def test_clear_of_a_successful_task_runs_its_side_effect_again_on_purpose(c: Cluster) -> None:
    final, _ = c.run("t_effect", run_id="clear-ok", conf={"sleep": 0.0}, timeout=60)
    assert final.state == DagRunState.SUCCESS and c.count("done-clear-ok") == 1
    out = c.cli("runs", "clear", "t_effect", "clear-ok", "--task", "effect", "--downstream")
    assert out.returncode == 0, out.stderr
    final, tasks = c.wait("t_effect", "clear-ok", timeout=60)
    assert final.state == DagRunState.SUCCESS
    assert c.count("done-clear-ok") == 2
    assert tasks["effect"].try_number == 2 and tasks["downstream"].result == 102

    unknown = c.cli("runs", "clear", "t_effect", "clear-ok", "--task", "efect")
    assert unknown.returncode == 1 and 'did you mean "effect"' in unknown.stderr


def test_mark_sets_a_run_or_a_task_state_by_hand(c: Cluster) -> None:
    final, _ = c.run("t_effect", run_id="mark-me", conf={"sleep": 0.0}, timeout=60)
    assert final.state == DagRunState.SUCCESS
    out = c.cli("runs", "mark", "t_effect", "mark-me", "--state", "failed", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] == "failed"
    # marking the task back to success judges the run again from its task runs
    run = mark_run(
        runtime_of(c.app), "t_effect", "mark-me", state="success", task_id="effect", actor="carol"
    )
    assert run.state == DagRunState.SUCCESS
    same = c.cli("runs", "mark", "t_effect", "mark-me", "--state", "success")
    assert same.returncode == 1 and "success already" in same.stderr
    missing = c.cli("runs", "mark", "t_effect", "no-such-run", "--state", "success")
    assert missing.returncode == 1 and "no run 'no-such-run'" in missing.stderr
    audit = c.cli("runs", "audit", "t_effect", "mark-me", "--json")
    actions = [(a["actor"], a["action"]) for a in json.loads(audit.stdout)]
    assert actions[0] == ("carol", "mark") and len(actions) == 2


def test_a_cancelled_run_starts_no_task_even_one_whose_rule_ignores_upstream_states(
    c: Cluster,
) -> None:
    run = trigger_dag(runtime_of(c.app), "t_cancel_all_done", run_id="cancel-all-done")
    wait_for(lambda: c.count("held-cancel-all-done") == 1, timeout=60, message="the held task")
    out = c.cli("runs", "cancel", "t_cancel_all_done", run.run_id, "--actor", "carol")
    assert out.returncode == 0, out.stderr
    (c.marks / "gate-cancel-all-done-held").touch()
    # A message for the downstream task arrives after the cancel (a redelivery, a late resume):
    # its rule (all_done) would run it whatever the upstream states, but the run is over.
    sent = c.app.send_task(
        "t_cancel_all_done.after_all_done",
        args=[run.run_id, None],
        queue=c.env["BEATFLOW_QUEUES"],
    )
    wait_for(
        lambda: consumed(c, "t_cancel_all_done.after_all_done", sent.id) == 1,
        timeout=60,
        message="the all_done task's message to be consumed",
    )
    assert_not_started(c, "t_cancel_all_done", run.run_id, "after_all_done")
    assert c.count("after-all-done-cancel-all-done") == 0
