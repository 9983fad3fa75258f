"""Dedupe keys on a real worker: a message delivered twice runs once; a duplicate that arrives
while the first is running waits for it; a dead letter replays under the same key."""

from __future__ import annotations

import pytest

from beatflow.runs import trigger_dag
from beatflow.runs.replay import replay_dead_letter
from beatflow.runtime import runtime_of
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_a_message_delivered_twice_runs_the_task_once(cluster):
    final, tasks = cluster.run("t_effect")
    assert final.state == "success"
    done = f"task run t_effect/{final.run_id}/effect already success; not running it again"
    for _ in range(2):  # publish the same task message again, twice
        cluster.app.send_task("t_effect.effect", args=(final.run_id,))
    wait_for(  # tied to this run: another test's duplicates cannot satisfy it
        lambda: cluster.log().count(done) >= 2,
        timeout=30,
        message="this run's duplicates to be handled",
    )
    assert cluster.count(f"start-{final.run_id}") == 1
    assert cluster.tasks("t_effect", final.run_id)["effect"].try_number == 1


def test_a_duplicate_arriving_while_the_task_runs_waits_and_does_not_run_it_again(cluster):
    record = trigger_dag(runtime_of(cluster.app), "t_effect", conf={"sleep": 2.0})
    key = f"t_effect/{record.run_id}/effect"
    wait_for(
        lambda: cluster.count(f"start-{record.run_id}") == 1,
        timeout=30,
        message="the task to start",
    )
    cluster.app.send_task("t_effect.effect", args=(record.run_id,))
    wait_for(
        lambda: f"task run {key} is held by" in cluster.log(),
        timeout=30,
        message="this run's duplicate to wait for the live lease",
    )
    final, tasks = cluster.wait("t_effect", record.run_id)
    assert final.state == "success"
    assert tasks["downstream"].result == 101
    # Only the held duplicate can log this for this key, and only when it retries after the
    # lease it waited for: the check below comes after the retry it would re-run the task in.
    wait_for(
        lambda: f"task run {key} already success; not running it again" in cluster.log(),
        timeout=60,
        message="the held duplicate to retry and find the stored result",
    )
    assert cluster.count(f"start-{record.run_id}") == 1
    assert cluster.count(f"done-{record.run_id}") == 1
    assert cluster.tasks("t_effect", record.run_id)["effect"].try_number == 1


def test_a_dead_letter_replayed_after_a_fix_succeeds_under_the_same_dedupe_key(cluster):
    final, tasks = cluster.run("t_fixable")
    assert final.state == "failed"
    assert tasks["fixable"].try_number == 2 and tasks["after_fix"].state == "upstream_failed"
    letters = [d for d in cluster.store.list_dead_letters("t_fixable") if d.run_id == final.run_id]
    assert len(letters) == 1 and letters[0].tries == 2
    (cluster.marks / f"fix-{final.run_id}").write_text("")
    replay_dead_letter(runtime_of(cluster.app), letters[0].id)
    wait_for(
        lambda: cluster.store.get_dag_run("t_fixable", final.run_id).state == "success",
        timeout=60,
        message="the replayed run to succeed",
    )
    tasks = cluster.tasks("t_fixable", final.run_id)
    assert tasks["fixable"].state == "success" and tasks["fixable"].try_number == 3
    assert tasks["fixable"].dedupe_key == letters[0].dedupe_key
    assert tasks["after_fix"].result == "after fixed"
    assert cluster.store.get_dead_letter(letters[0].id).replayed_at is not None
    assert cluster.count(f"fixable-{final.run_id}") == 3


def test_a_dead_letter_replayed_without_a_fix_fails_again_and_the_run_ends(cluster):
    final, _ = cluster.run("t_fixable")
    assert final.state == "failed"
    [letter] = [d for d in cluster.store.list_dead_letters("t_fixable") if d.run_id == final.run_id]
    replay_dead_letter(runtime_of(cluster.app), letter.id)  # nothing fixed: the task fails again
    wait_for(
        lambda: (
            cluster.store.get_dag_run("t_fixable", final.run_id).state == "failed"
            # retries=1 holds again for the replay: two more tries (3 and 4), not one
            and cluster.tasks("t_fixable", final.run_id)["fixable"].try_number == 4
        ),
        timeout=90,
        message="the replayed run to end again (failed), not hang in running",
    )
    tasks = cluster.tasks("t_fixable", final.run_id)
    assert tasks["fixable"].state == "failed"
    # the downstream task the replay reset is decided again, not left waiting to run
    assert tasks["after_fix"].state == "upstream_failed"
    assert cluster.count(f"fixable-{final.run_id}") == 4
    newer = [d for d in cluster.store.list_dead_letters("t_fixable") if d.run_id == final.run_id]
    assert [d.tries for d in newer] == [2]  # the replay's own letter, for its round of two
