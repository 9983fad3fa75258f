"""Trigger rules decide each downstream task from its upstream task runs' final states."""

from __future__ import annotations

import pytest

from beatflow.execution.rules import dag_run_state, decide

S, F, U, K = "success", "failed", "upstream_failed", "skipped"


@pytest.mark.parametrize(
    "rule, states, expected",
    [
        ("all_success", [S, S], "run"),
        ("all_success", [S, F], "upstream_failed"),
        ("all_success", [S, U], "upstream_failed"),
        ("all_success", [S, K], "skipped"),
        ("all_done", [F, K, U], "run"),
        ("all_failed", [F, U], "run"),
        ("all_failed", [F, S], "skipped"),
        ("one_success", [F, S], "run"),
        ("one_success", [F, F], "upstream_failed"),
        ("one_success", [K, K], "skipped"),
        ("one_failed", [S, F], "run"),
        ("one_failed", [S, S], "skipped"),
        ("none_failed", [S, K], "run"),
        ("none_failed", [S, U], "upstream_failed"),
        ("none_failed_min_one_success", [K, K], "skipped"),
        ("none_failed_min_one_success", [K, S], "run"),
        ("none_skipped", [S, F], "run"),
        ("none_skipped", [S, K], "skipped"),
        ("always", [F, U], "run"),
        # Airflow's one_done: one upstream succeeded or failed (an upstream_failed one never ran)
        ("one_done", [K, S], "run"),
        ("one_done", [K, F], "run"),
        ("one_done", [U, F], "run"),
        ("one_done", [K, K], "skipped"),
        ("one_done", [K, U], "skipped"),
        # all_skipped: every upstream skipped, else skipped itself (never upstream_failed)
        ("all_skipped", [K, K], "run"),
        ("all_skipped", [K, S], "skipped"),
        ("all_skipped", [K, F], "skipped"),
        # all_done_min_one_success: all done (whatever the state) and one succeeded
        ("all_done_min_one_success", [S, F], "run"),
        ("all_done_min_one_success", [S, U, K], "run"),
        ("all_done_min_one_success", [F, U], "skipped"),
        ("all_done_min_one_success", [K, K], "skipped"),
        ("all_success", [], "run"),
    ],
)
def test_each_rule_decides_from_upstream_states(rule, states, expected):
    assert decide(rule, states) == expected


def test_an_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown trigger rule"):
        decide("maybe", [S])


def test_a_dag_run_fails_when_any_task_run_failed_or_could_not_run():
    assert dag_run_state([S, K, S]) == "success"
    assert dag_run_state([S, F, S]) == "failed"
    assert dag_run_state([S, U]) == "failed"


@pytest.mark.parametrize("states", [[], ["running"], ["up_for_retry", "success"], [S, "running"]])
def test_a_dag_run_with_no_rows_or_unfinished_rows_is_not_final(states):
    assert dag_run_state(states) is None


def test_trigger_rules_have_one_home_and_each_decides() -> None:
    from beatflow.dag.model import TRIGGER_RULES
    from beatflow.execution import rules

    assert rules.TRIGGER_RULES is TRIGGER_RULES  # imported, not restated
    for rule in TRIGGER_RULES:
        assert decide(rule, [S]) in ("run", "skipped", "upstream_failed")
    with pytest.raises(ValueError, match="unknown trigger rule"):
        decide("all_sucess", [S])
