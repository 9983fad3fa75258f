"""SLA-miss and stuck-task-run rules, and the leader tracker that counts failovers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beatflow.dag.model import DAG, TaskSpec
from beatflow.observability.broker import Leader, LeaderTracker
from beatflow.observability.detect import find_stuck, sla_miss
from beatflow.store.records import DagRunRecord, TaskRunRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _run(state: str, logical: datetime | None, ended: datetime | None = None) -> DagRunRecord:
    return DagRunRecord(
        "etl", "r1", logical, "scheduled", {}, state, logical or NOW, logical, ended, None
    )


def _task(
    state: str,
    started: datetime,
    lease: datetime | None,
    task_id: str = "load",
) -> TaskRunRecord:
    return TaskRunRecord(
        f"etl/r1/{task_id}",
        "etl",
        "r1",
        task_id,
        -1,
        state,
        1,
        "w1@h",
        "c1",
        lease,
        started,
        None,
        None,
        None,
        None,
    )


def test_a_run_still_going_after_logical_date_plus_sla_missed_it() -> None:
    dag = DAG("etl", sla=timedelta(minutes=30))
    miss = sla_miss(dag, _run("running", NOW - timedelta(minutes=31)), NOW)
    assert miss is not None
    assert miss.deadline == NOW - timedelta(minutes=1)
    assert miss.key == "etl/r1"


def test_a_run_before_its_deadline_or_finished_in_time_did_not_miss() -> None:
    dag = DAG("etl", sla=timedelta(minutes=30))
    assert sla_miss(dag, _run("running", NOW - timedelta(minutes=29)), NOW) is None
    on_time = _run("success", NOW - timedelta(hours=1), ended=NOW - timedelta(minutes=40))
    assert sla_miss(dag, on_time, NOW) is None


def test_a_run_that_finished_after_its_deadline_missed_it() -> None:
    dag = DAG("etl", sla=timedelta(minutes=30))
    late = _run("success", NOW - timedelta(hours=1), ended=NOW - timedelta(minutes=10))
    assert sla_miss(dag, late, NOW) is not None


def test_no_sla_no_logical_date_or_an_ancient_deadline_is_never_a_miss() -> None:
    assert sla_miss(DAG("etl"), _run("running", NOW - timedelta(days=1)), NOW) is None
    dag = DAG("etl", sla=timedelta(minutes=1))
    assert sla_miss(dag, _run("running", None), NOW) is None
    assert sla_miss(dag, _run("queued", NOW - timedelta(days=3)), NOW) is None


def test_a_running_task_run_with_an_expired_lease_or_past_its_time_limit_is_stuck() -> None:
    dag = DAG("etl")
    dag.tasks["load"] = TaskSpec("load", fn=lambda: None, time_limit=60)
    dag.tasks["other"] = TaskSpec("other", fn=lambda: None)
    runs = [
        _task("running", NOW - timedelta(seconds=10), NOW - timedelta(seconds=1)),
        _task("running", NOW - timedelta(seconds=61), NOW + timedelta(seconds=20), "load"),
        _task("running", NOW - timedelta(seconds=100), NOW + timedelta(seconds=20), "other"),
        _task("success", NOW - timedelta(hours=2), NOW - timedelta(hours=1), "done"),
    ]
    stuck = find_stuck(runs, dag, default_time_limit=360, now=NOW)
    assert [(s.task_id, s.reason) for s in stuck] == [
        ("load", "lease_expired"),
        ("load", "past_time_limit"),
    ]


def test_the_leader_tracker_counts_each_epoch_step_after_the_first_reading_as_a_failover() -> None:
    t = LeaderTracker()
    assert t.observe(Leader("beat-1", 3, ("beat-1", "beat-2"))) == ({"beat-1": 1, "beat-2": 0}, 0)
    assert t.observe(Leader(None, 3, ("beat-2",))) == ({"beat-1": 0, "beat-2": 0}, 0)
    assert t.observe(Leader("beat-2", 4, ("beat-2",))) == ({"beat-1": 0, "beat-2": 1}, 1)
    # two changes between readings count twice
    assert t.observe(Leader("beat-2", 6, ("beat-2",)))[1] == 2
