"""The node decision, exhaustively: every trigger rule against every mix of upstream states
(checked against a second, set-based statement of the rules), every claim outcome and lease
situation, map expansions (all or nothing), and the DAG run's outcome; then properties that
hold for any input (hypothesis)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beatflow.dag.model import TRIGGER_RULES
from beatflow.execution.decide import (
    UPSTREAM_WAIT_RETRIES,
    WORKER_LOST_TRIES,
    Action,
    ClaimSeen,
    Situation,
    decide,
    run_outcome,
)
from beatflow.states import DagRunState, TaskRunState

FINAL = ["success", "failed", "upstream_failed", "skipped", "cancelled"]
UNFINISHED = ["running", "up_for_retry"]


@dataclass(frozen=True)
class Row:
    task_id: str
    state: str
    map_index: int = -1
    map_count: int | None = None


def situation(rule: str, states: list[str], **kw: object) -> Situation:
    rows = [Row(f"u{i}", s) for i, s in enumerate(states)]
    base = Situation(
        trigger_rule=rule,
        upstream=[r.task_id for r in rows],
        mapped=[],
        rows=rows,
        own=None,
        waits=0,
        retries=1,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def oracle(rule: str, states: list[str]) -> Action:
    """The trigger rules said a second way, with sets: what the decision must match."""
    kinds = {"ok" if s == "success" else "skip" if s == "skipped" else "bad" for s in states}
    if not states or rule in ("always", "all_done"):
        return Action.CLAIM
    table = {
        "all_success": Action.CLAIM
        if kinds == {"ok"}
        else Action.UPSTREAM_FAILED
        if "bad" in kinds
        else Action.SKIPPED,
        "all_failed": Action.CLAIM if kinds == {"bad"} else Action.SKIPPED,
        "one_success": Action.CLAIM
        if "ok" in kinds
        else Action.SKIPPED
        if kinds == {"skip"}
        else Action.UPSTREAM_FAILED,
        "one_failed": Action.CLAIM if "bad" in kinds else Action.SKIPPED,
        "none_failed": Action.UPSTREAM_FAILED if "bad" in kinds else Action.CLAIM,
        "none_failed_min_one_success": Action.UPSTREAM_FAILED
        if "bad" in kinds
        else Action.CLAIM
        if "ok" in kinds
        else Action.SKIPPED,
        "none_skipped": Action.SKIPPED if "skip" in kinds else Action.CLAIM,
        # done: succeeded or failed itself (upstream_failed and cancelled did not run)
        "one_done": Action.CLAIM if {"success", "failed"} & set(states) else Action.SKIPPED,
        "all_skipped": Action.CLAIM if kinds == {"skip"} else Action.SKIPPED,
        "all_done_min_one_success": Action.CLAIM if "ok" in kinds else Action.SKIPPED,
    }
    return table[rule]


MIXES = [list(m) for n in range(4) for m in itertools.combinations_with_replacement(FINAL, n)]


@pytest.mark.parametrize("rule", TRIGGER_RULES)
def test_every_rule_decides_every_mix_of_final_upstream_states_like_the_oracle(rule):
    for states in MIXES:
        for order in set(itertools.permutations(states)):
            got = decide(situation(rule, list(order))).action
            assert got == oracle(rule, states), (rule, order)


@pytest.mark.parametrize("rule", TRIGGER_RULES)
@pytest.mark.parametrize("pending", UNFINISHED + [None])
def test_an_upstream_not_final_or_missing_makes_the_task_wait_then_upstream_failed(rule, pending):
    states = ["success"] if pending is None else ["success", pending]
    s = situation(rule, states)
    if pending is None:  # an upstream with no row at all
        s = dataclasses.replace(s, upstream=[*s.upstream, "missing"])
    for waits in range(UPSTREAM_WAIT_RETRIES):
        assert decide(dataclasses.replace(s, waits=waits)).action is Action.WAIT
    gave_up = decide(dataclasses.replace(s, waits=UPSTREAM_WAIT_RETRIES))
    assert gave_up.action is Action.UPSTREAM_FAILED and "never became final" in gave_up.reason


@pytest.mark.parametrize("state", FINAL)
def test_a_task_whose_own_row_is_final_is_done_whatever_its_upstream(state):
    s = situation("all_success", ["running"], own=Row("me", state))
    assert decide(s).action is Action.DONE


@pytest.mark.parametrize("state", UNFINISHED)
def test_a_task_whose_own_row_is_unfinished_goes_through_its_rule_and_claims(state):
    assert decide(situation("all_success", ["success"], own=Row("me", state))).action is (
        Action.CLAIM
    )


def test_recorded_state_is_given_only_for_the_decisions_recorded_without_running():
    assert decide(situation("all_success", ["failed"])).recorded_state is (
        TaskRunState.UPSTREAM_FAILED
    )
    assert decide(situation("all_success", ["skipped"])).recorded_state is TaskRunState.SKIPPED
    assert decide(situation("all_success", ["success"])).recorded_state is None


CLAIMS = [
    (outcome, taken_over, try_number, retries, expands)
    for outcome in ("run", "done", "held")
    for taken_over in (False, True)
    for retries in (0, 1, 3)
    for try_number in range(1, retries + WORKER_LOST_TRIES + 4)
    for expands in (False, True)
]


@pytest.mark.parametrize("outcome, taken_over, try_number, retries, expands", CLAIMS)
def test_after_the_claim_each_outcome_and_lease_situation_has_one_action(
    outcome, taken_over, try_number, retries, expands
):
    s = situation(
        "all_success",
        ["success"],
        retries=retries,
        expands=expands,
        claim=ClaimSeen(outcome, try_number, taken_over),
    )
    got = decide(s).action
    if outcome == "done":
        assert got is Action.DONE
    elif outcome == "held":
        assert got is Action.HELD
    elif taken_over and try_number > retries + 1 + WORKER_LOST_TRIES:
        assert got is Action.FAIL_WORKER_LOST
    else:
        assert got is (Action.EXPAND if expands else Action.RUN)


def test_a_task_that_killed_its_worker_too_often_says_how_many_times():
    s = situation("all_success", [], retries=1, claim=ClaimSeen("run", 5, True))
    decision = decide(s)
    assert decision.action is Action.FAIL_WORKER_LOST and "worker lost 4 times" in decision.reason


def mapped(count: int | None, instances: list[str], own: str = "success") -> Situation:
    rows = [Row("m", own, -1, count)] + [Row("m", s, i) for i, s in enumerate(instances)]
    return Situation("all_success", ["m"], ["m"], rows, None, 0, 0)


def test_a_mapped_upstream_counts_by_its_instances_only_when_all_of_them_are_final():
    assert decide(mapped(3, ["success"] * 3)).action is Action.CLAIM
    assert decide(mapped(3, ["success", "failed", "success"])).action is Action.UPSTREAM_FAILED
    assert decide(mapped(3, ["success", "success"])).action is Action.WAIT  # partial list
    assert decide(mapped(3, ["success", "running", "success"])).action is Action.WAIT
    assert decide(mapped(0, [])).action is Action.CLAIM  # mapped over an empty list


def test_a_mapped_upstream_whose_expansion_did_not_succeed_counts_as_itself():
    assert decide(mapped(None, [], own="failed")).action is Action.UPSTREAM_FAILED
    assert decide(mapped(None, [], own="skipped")).action is Action.SKIPPED
    assert decide(mapped(None, [], own="running")).action is Action.WAIT


def test_a_success_without_an_expansion_count_is_not_an_expansion():
    # what a user task returning {"map_count": n} used to be mistaken for: no count, no list
    assert decide(mapped(None, [])).action is Action.WAIT


def test_a_plain_upstream_is_never_read_as_a_map_expansion():
    s = Situation("all_success", ["u"], [], [Row("u", "success", -1, None)], None, 0, 0)
    assert decide(s).action is Action.CLAIM


S, F, R, U = "success", "failed", "running", "up_for_retry"


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([], None),  # nothing ran: not a success
        ([Row("a", R)], None),
        ([Row("a", U), Row("b", S)], None),
        ([Row("a", S)], None),  # b has no row
        ([Row("a", S), Row("b", S)], DagRunState.SUCCESS),
        ([Row("a", S), Row("b", "skipped")], DagRunState.SUCCESS),
        ([Row("a", F), Row("b", "upstream_failed")], DagRunState.FAILED),
        ([Row("a", S), Row("b", "cancelled")], DagRunState.FAILED),
    ],
)
def test_a_dag_run_is_final_only_when_every_task_has_a_final_row(rows, expected):
    assert run_outcome({"a": False, "b": False}, rows) == expected


def test_a_dag_run_with_a_map_is_final_only_when_every_instance_is():
    expected = {"m": True}
    assert run_outcome(expected, mapped(2, [S]).rows) is None
    assert run_outcome(expected, mapped(2, [S, R]).rows) is None
    assert run_outcome(expected, mapped(2, [S, S]).rows) is DagRunState.SUCCESS
    assert run_outcome(expected, mapped(2, [S, F]).rows) is DagRunState.FAILED
    assert run_outcome(expected, mapped(0, []).rows) is DagRunState.SUCCESS


def test_a_quiet_task_must_end_but_its_failure_is_not_the_runs():
    expected = {"work": False, "teardown": False}
    ok = [Row("work", "success"), Row("teardown", "failed")]
    assert run_outcome(expected, ok, quiet=["teardown"]) is DagRunState.SUCCESS
    assert run_outcome(expected, ok) is DagRunState.FAILED
    bad = [Row("work", "failed"), Row("teardown", "success")]
    assert run_outcome(expected, bad, quiet=["teardown"]) is DagRunState.FAILED
    assert run_outcome(expected, [Row("work", "success")], quiet=["teardown"]) is None


def test_a_dag_with_no_tasks_has_no_outcome():
    assert run_outcome({}, []) is None


# ---- properties -------------------------------------------------------------------------------

states = st.sampled_from(FINAL + UNFINISHED)
task_ids = st.sampled_from(["a", "b", "c", "d"])
rows_st = st.lists(st.builds(Row, task_ids, states), max_size=8)


@given(
    rule=st.sampled_from(TRIGGER_RULES),
    rows=rows_st,
    upstream=st.sets(task_ids),
    waits=st.integers(0, UPSTREAM_WAIT_RETRIES + 3),
)
def test_before_the_claim_nothing_runs_and_only_final_upstream_lets_it_claim(
    rule, rows, upstream, waits
):
    s = Situation(rule, sorted(upstream), [], rows, None, waits, 1)
    got = decide(s).action
    assert got not in (Action.RUN, Action.EXPAND, Action.HELD, Action.FAIL_WORKER_LOST)
    latest = {r.task_id: r.state for r in rows}  # several rows per task: the last one counts
    settled = all(latest.get(u) in FINAL for u in upstream)
    if got is Action.CLAIM or got is Action.SKIPPED:
        assert settled
    if not settled:
        assert got is (Action.WAIT if waits < UPSTREAM_WAIT_RETRIES else Action.UPSTREAM_FAILED)


@given(rule=st.sampled_from(TRIGGER_RULES), rows=rows_st, data=st.data())
def test_the_decision_does_not_depend_on_the_order_of_the_rows(rule, rows, data):
    unique = list({r.task_id: r for r in rows}.values())
    shuffled = data.draw(st.permutations(unique))
    upstream = sorted({r.task_id for r in unique})
    a = decide(Situation(rule, upstream, [], unique, None, 0, 1))
    b = decide(Situation(rule, upstream, [], shuffled, None, 0, 1))
    assert a.action is b.action


@given(rows=rows_st, expected=st.sets(task_ids, min_size=1))
def test_a_dag_run_succeeds_only_if_every_expected_task_has_a_final_unfailed_row(rows, expected):
    unique = list({r.task_id: r for r in rows}.values())
    got = run_outcome(dict.fromkeys(expected, False), unique)
    by_task = {r.task_id: r.state for r in unique}
    if got is DagRunState.SUCCESS:
        assert all(by_task.get(t) in ("success", "skipped") for t in expected)
    if any(by_task.get(t) not in FINAL for t in expected):
        assert got is None
    else:
        assert got is not None


@given(
    count=st.integers(0, 6),
    instances=st.lists(states, max_size=6),
)
def test_a_mapped_upstream_never_counts_with_a_partial_or_unfinished_list(count, instances):
    got = decide(mapped(count, instances)).action
    complete = len(instances) >= count and all(s in FINAL for s in instances[:count])
    if not complete:
        assert got is Action.WAIT
    else:
        assert got is not Action.WAIT
