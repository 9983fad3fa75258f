"""Following a run (`dags trigger --wait`, runs.follow_run) is woken by the run's announcement
on Redis, not by polling: with the fallback poll pushed out to an hour, the follower still
returns once the run is final. Real worker, Redis and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from beatflow.runs import follow_run, trigger_dag
from beatflow.states import DagRunState
from beatflow.store import DagRunRecord
from tests import procs

pytestmark = pytest.mark.slow

NO_POLL = 3600.0  # the fallback read would come after an hour: only an announcement wakes us


def follow_in_thread(cluster, dag_id: str, run_id: str, **kw: object) -> dict[str, object]:
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["final"] = follow_run(cluster.app, dag_id, run_id, **kw)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    threading.Thread(target=body, daemon=True).start()
    return out


def test_a_followed_run_is_seen_final_without_polling(cluster):
    record = trigger_dag(cluster.app, "t_chain")
    out = follow_in_thread(cluster, "t_chain", record.run_id, poll=NO_POLL, timeout=2 * NO_POLL)
    procs.wait_for(lambda: out, timeout=90, message="follow_run to return after the run ends")
    assert "error" not in out, out
    final = out["final"]
    assert isinstance(final, DagRunRecord) and final.state == DagRunState.SUCCESS
    stored = cluster.store.get_dag_run("t_chain", record.run_id)
    assert stored is not None and stored.state == DagRunState.SUCCESS


def test_task_changes_reach_the_callback_and_the_end_is_seen(cluster):
    seen: list[tuple[str, str]] = []
    record = trigger_dag(cluster.app, "t_chain")
    out = follow_in_thread(
        cluster,
        "t_chain",
        record.run_id,
        poll=NO_POLL,
        timeout=2 * NO_POLL,
        on_task_change=lambda t: seen.append((t.task_id, t.state)),
    )
    procs.wait_for(lambda: out, timeout=90, message="follow_run to return after the run ends")
    assert "error" not in out, out
    assert {t for t, s in seen if s == "success"} == set(cluster.tasks("t_chain", record.run_id))


def test_a_run_closed_without_an_announcement_is_found_by_the_fallback_poll(cluster):
    # a run finished by a path that announces nothing (here: the store directly)
    run = cluster.store.create_dag_run(
        "t_chain", "follow-fallback", logical_date=datetime.now(UTC), trigger="manual", conf={}
    )[0]
    out = follow_in_thread(cluster, "t_chain", run.run_id, poll=0.2, timeout=120)
    cluster.store.finish_dag_run("t_chain", run.run_id, "failed")
    procs.wait_for(lambda: out, timeout=60, message="the fallback poll to see the end")
    assert "error" not in out, out
    assert out["final"].state == DagRunState.FAILED  # type: ignore[attr-defined]
