"""The reconciler ends every run whatever step of its lifecycle was lost: a run created but
never dispatched, a run marked running whose canvas was never sent, a run whose closing step
was lost, a run that overstays its dagrun_timeout, a run that cannot make progress. Each action
is counted once by the exporter (beatflow_reconciler_actions_total{dag, action})."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from beatflow.errors import RunStateError
from beatflow.runs import trigger_dag
from beatflow.runs.operator import cancel_run
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState, TaskRunState
from beatflow.store.models import task_runs
from tests.cluster import Cluster
from tests.consumed import assert_not_started, consumed
from tests.faults.runs.conftest import BOUND, wait_action
from tests.integration.observability.conftest import Samples
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_a_run_created_but_never_dispatched_is_dispatched_and_runs_once(cluster: Cluster) -> None:
    # the fault: trigger_dag committed the run, then dispatch_waiting never happened
    run, created = cluster.store.create_dag_run("t_single", "never-dispatched", conf={"sleep": 0.0})
    assert created and run.state == DagRunState.QUEUED
    final, tasks = cluster.wait("t_single", run.run_id, timeout=BOUND)
    assert final.state == DagRunState.SUCCESS
    assert cluster.count(f"step-{run.run_id}") == 1
    assert final.resume_count == 0  # dispatched, not resumed


def test_a_run_marked_running_whose_canvas_was_never_sent_is_resumed_and_runs_once(
    cluster: Cluster, metrics: Callable[[], Samples]
) -> None:
    store = cluster.store
    store.create_dag_run("t_chord", "never-sent", conf={"hold": 0.0})
    # the fault: queued -> running committed, then the send never happened (broker blip, kill)
    started = store.start_queued_dag_runs("t_chord", 16)
    assert [r.run_id for r in started] == ["never-sent"]
    final, tasks = cluster.wait("t_chord", "never-sent", timeout=BOUND)
    assert final.state == DagRunState.SUCCESS
    assert final.resume_count == 1
    assert tasks["tail"].result == 30
    for name in ("part1", "part2", "join", "tail"):
        assert cluster.count(f"{name}-never-sent") == 1
    wait_for(
        lambda: "reconciler resumes DAG run t_chord/never-sent" in cluster.log(),
        timeout=30,
        message="the log line",
    )
    assert wait_action(metrics, "t_chord", "resumed") == 1


def test_a_run_whose_closing_step_was_lost_is_closed(
    cluster: Cluster, metrics: Callable[[], Samples]
) -> None:
    final, _ = cluster.run("t_single", run_id="lost-close")
    assert final.state == DagRunState.SUCCESS
    # the fault: every task is final, the finish message was lost (the run is still running)
    cluster.store.transition_dag_run(
        "t_single", "lost-close", to=DagRunState.RUNNING, from_states={DagRunState.SUCCESS}
    )
    final, _ = cluster.wait("t_single", "lost-close", timeout=BOUND)
    assert final.state == DagRunState.SUCCESS
    assert final.resume_count == 0  # closed, not resumed
    assert cluster.count("step-lost-close") == 1
    wait_for(
        lambda: "reconciler closed DAG run t_single/lost-close" in cluster.log(),
        timeout=30,
        message="the log line",
    )
    assert wait_action(metrics, "t_single", "closed") == 1


def test_a_map_whose_last_instance_ended_without_sending_what_follows_is_resumed(
    cluster: Cluster,
) -> None:
    final, _ = cluster.run("t_map", run_id="lost-fan-in")
    assert final.state == DagRunState.SUCCESS
    # the fault: the last instance to end committed its count, then its worker died before
    # sending what follows the .map() (collect never ran; the run is still running)
    t = task_runs.c
    with cluster.store._write("losing what follows the map") as conn:
        conn.execute(sa.delete(task_runs).where(t.run_id == "lost-fan-in", t.task_id == "collect"))
    cluster.store.transition_dag_run(
        "t_map", "lost-fan-in", to=DagRunState.RUNNING, from_states={DagRunState.SUCCESS}
    )
    final, tasks = cluster.wait("t_map", "lost-fan-in", timeout=BOUND)
    assert final.state == DagRunState.SUCCESS
    assert final.resume_count == 1
    assert tasks["collect"].result["values"] == [1, 4, 9]
    # the resumed expander found every instance ended: none ran again
    assert [tasks[f"square[{i}]"].try_number for i in range(3)] == [1, 1, 1]


def test_a_run_past_its_dagrun_timeout_fails_and_its_remaining_tasks_are_cancelled(
    cluster: Cluster, metrics: Callable[[], Samples]
) -> None:
    run = trigger_dag(runtime_of(cluster.app), "t_linger", run_id="overstays")
    final, tasks = cluster.wait("t_linger", run.run_id, timeout=BOUND)
    assert final.state == DagRunState.FAILED
    assert "dagrun_timeout" in (final.failure_reason or "")
    assert tasks["linger"].state == TaskRunState.CANCELLED
    assert wait_action(metrics, "t_linger", "timed_out") == 1
    # the task that overstayed finishes its function, but cannot record it nor go on
    (cluster.marks / "gate-overstays-linger").touch()
    wait_for(
        lambda: consumed(cluster, "t_linger.linger") >= 1,
        timeout=30,
        message="the linger message to be consumed",
    )
    # a late message for the next task (a resume, a redelivery): the run is over, it starts not
    late = cluster.app.send_task(
        "t_linger.after_linger", args=[run.run_id, None], queue=cluster.env["BEATFLOW_QUEUES"]
    )
    wait_for(
        lambda: consumed(cluster, "t_linger.after_linger", late.id) == 1,
        timeout=30,
        message="the late after_linger message to be consumed",
    )
    tasks = cluster.tasks("t_linger", run.run_id)
    assert tasks["linger"].state == TaskRunState.CANCELLED
    assert cluster.count("lingered-overstays") == 1  # its function did finish
    assert_not_started(cluster, "t_linger", run.run_id, "after_linger")
    assert cluster.count("after-overstays") == 0
    assert tasks.get("after_linger") is None or tasks["after_linger"].state == "cancelled", {
        t: r.state for t, r in tasks.items()
    }
    with pytest.raises(RunStateError, match="already ended"):
        cancel_run(runtime_of(cluster.app), "t_linger", run.run_id, actor="test")


def test_a_run_that_cannot_progress_is_failed_after_its_resumes_with_the_reason(
    cluster: Cluster, metrics: Callable[[], Samples]
) -> None:
    # its only task goes to a queue no worker serves: resumed once (max 1), then failed
    run = trigger_dag(runtime_of(cluster.app), "t_stranded", run_id="stranded")
    final, _ = cluster.wait("t_stranded", run.run_id, timeout=BOUND)
    assert final.state == DagRunState.FAILED
    assert final.resume_count == 1
    assert (
        final.failure_reason is not None and "no progress after 1 resumes" in final.failure_reason
    )
    wait_for(
        lambda: "reconciler failed DAG run t_stranded/stranded" in cluster.log(),
        timeout=30,
        message="the log line",
    )
    assert wait_action(metrics, "t_stranded", "resumed") == 1
    assert wait_action(metrics, "t_stranded", "failed") == 1


def test_a_retry_waiting_for_its_backoff_is_not_mistaken_for_a_lost_canvas(
    cluster: Cluster,
) -> None:
    # the retry waits 20 s, over three times the stall time: the run is silent, not lost
    run = trigger_dag(runtime_of(cluster.app), "t_slow_retry", run_id="slow-retry")
    final, tasks = cluster.wait("t_slow_retry", run.run_id, timeout=BOUND)
    assert final.state == DagRunState.SUCCESS
    assert final.resume_count == 0
    assert tasks["flaky_once"].try_number == 2
    assert cluster.count("flaky-slow-retry") == 2


def test_a_run_whose_canvas_was_lost_after_its_branch_decided_resumes_with_that_decision(
    cluster: Cluster,
) -> None:
    store = cluster.store
    store.create_dag_run("t_branch", "lost-after-branch", conf={"follow": "left"})
    started = store.start_queued_dag_runs("t_branch", 16)
    assert [r.run_id for r in started] == ["lost-after-branch"]
    # the fault: the branch decided (its success row holds the ids it followed: "right", not
    # what the conf would pick now) and every message after it was lost
    key = "t_branch/lost-after-branch/pick"
    claim = store.claim_task_run(
        key, dag_id="t_branch", run_id="lost-after-branch", task_id="pick", map_index=-1,
        worker="gone", celery_task_id="gone",
    )  # fmt: skip
    assert claim.outcome == "run" and claim.token is not None
    assert store.finish_task_run(key, claim.token, state="success", result=["right"])
    final, tasks = cluster.wait("t_branch", "lost-after-branch", timeout=BOUND)
    assert final.state == DagRunState.SUCCESS, tasks
    assert final.resume_count == 1
    assert cluster.count("pick-lost-after-branch") == 0  # decided once, never again
    assert (tasks["left"].state, tasks["right"].state) == ("skipped", "success")
    assert tasks["left"].error == "branch pick followed right"
    assert cluster.count("right-lost-after-branch") == 1
    assert cluster.count("join-lost-after-branch") == 1
