"""Branches, short-circuits and Skip on a real worker: what each skips, what still runs (by
its trigger rule), the reasons recorded, and a branch that names a task it cannot follow."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def states(tasks) -> dict[str, str]:
    return {task_id: t.state for task_id, t in tasks.items()}


def test_a_branch_follows_the_task_it_returns_and_skips_the_others_by_trigger_rule(cluster):
    final, tasks = cluster.run("t_branch", conf={"follow": "left"})
    assert final.state == "success", tasks
    assert states(tasks) == {
        "pick": "success",
        "left": "success",
        "right": "skipped",  # not followed
        "after_left": "success",
        "after_right": "skipped",  # all_success below a skipped task
        "join": "success",  # none_failed_min_one_success
        "also_direct": "success",  # not followed, but below the followed "left"
    }
    assert tasks["pick"].result == ["left"]  # the decision, recorded with the branch's success
    assert tasks["right"].error == "branch pick followed left"
    assert tasks["after_left"].result == "after left"
    run = final.run_id
    assert (cluster.count(f"left-{run}"), cluster.count(f"right-{run}")) == (1, 0)
    assert cluster.count(f"join-{run}") == 1


def test_a_branch_may_follow_several_tasks_or_none(cluster):
    final, tasks = cluster.run("t_branch", conf={"follow": ["right", "left"]})
    assert final.state == "success", tasks
    assert {t for t, s in states(tasks).items() if s == "skipped"} == set()
    assert tasks["pick"].result == ["right", "left"]

    final, tasks = cluster.run("t_branch", conf={"follow": None})
    assert final.state == "success", tasks
    skipped = {t for t, s in states(tasks).items() if s == "skipped"}
    assert skipped == {"left", "right", "after_left", "after_right", "join", "also_direct"}
    assert tasks["left"].error == "branch pick followed no task"


def test_a_branch_that_names_a_task_it_cannot_follow_fails_with_the_reason(cluster):
    final, tasks = cluster.run("t_branch", conf={"follow": "after_left"})
    assert final.state == "failed"
    assert tasks["pick"].state == "failed"
    assert tasks["pick"].error == (
        "ValueError: branch task \"pick\" returned 'after_left', not one of its direct "
        "downstream tasks (also_direct, left, right)"
    )
    assert tasks["left"].state == "upstream_failed"
    letters = [d for d in cluster.store.list_dead_letters("t_branch") if d.run_id == final.run_id]
    assert len(letters) == 1 and letters[0].task_id == "pick"


def test_a_branch_that_returns_a_task_group_id_follows_the_groups_root_tasks(cluster):
    final, tasks = cluster.run("t_branch_group", conf={"follow": "fast"})
    assert final.state == "success", tasks
    assert states(tasks) == {
        "pick": "success",
        "fast.one": "success",  # the group's roots, followed
        "fast.two": "success",
        "fast.merge": "success",  # below them, inside the group
        "slow.one": "skipped",  # the other group's root, not followed
        "slow.after_right": "skipped",  # all_success below a skipped task
        "join": "success",  # none_failed_min_one_success
    }
    assert tasks["pick"].result == ["fast.one", "fast.two"]  # the roots it followed
    assert tasks["slow.one"].error == "branch pick followed fast.one, fast.two"
    assert tasks["fast.merge"].result == "after fast.one"
    run = final.run_id
    assert cluster.count(f"fetch-fast.one-{run}") == 1
    assert cluster.count(f"fetch-slow.one-{run}") == 0


def test_a_falsy_short_circuit_skips_everything_downstream_whatever_its_trigger_rule(cluster):
    final, tasks = cluster.run("t_short", conf={"go": 0})
    assert final.state == "success", tasks
    assert states(tasks) == {"check": "success", "first": "skipped", "cleanup": "skipped"}
    assert tasks["cleanup"].error == "short-circuit check returned 0"


def test_a_truthy_short_circuit_passes_its_value_on(cluster):
    final, tasks = cluster.run("t_short", conf={"go": "yes"})
    assert final.state == "success", tasks
    assert tasks["check"].result == "yes"
    assert tasks["first"].result == "first got yes"
    assert tasks["cleanup"].state == "success"


def test_a_short_circuit_that_respects_trigger_rules_skips_only_its_direct_downstream(cluster):
    final, tasks = cluster.run("t_short_direct", conf={"go": []})
    assert final.state == "success", tasks
    assert states(tasks) == {"check_direct": "success", "first": "skipped", "cleanup": "success"}


def test_a_task_that_raises_skip_ends_skipped_with_its_reason(cluster):
    final, tasks = cluster.run("t_skip_self", conf={"skip": True})
    assert final.state == "success", tasks
    assert tasks["maybe"].state == "skipped"
    assert tasks["maybe"].error == "no new files today"
    assert tasks["maybe"].try_number == 1
    assert tasks["load"].state == "skipped"  # all_success
    assert tasks["cleanup"].state == "success"  # all_done
    assert cluster.store.list_dead_letters("t_skip_self") == []

    final, tasks = cluster.run("t_skip_self", conf={"skip": False})
    assert states(tasks) == {"maybe": "success", "load": "success", "cleanup": "success"}


def test_map_instances_that_skip_themselves_end_the_fan_in_and_the_run(cluster):
    final, tasks = cluster.run("t_skip_map")
    assert final.state == "success", tasks
    assert [tasks[f"evens_only[{i}]"].state for i in range(4)] == [
        "success", "skipped", "success", "skipped"
    ]  # fmt: skip
    assert tasks["evens_only[1]"].error == "1 is odd"
    assert tasks["collect"].result == [0, None, 2, None]
