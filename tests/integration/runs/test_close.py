"""Closing a run happens once: a duplicate closing step (a redelivered finish message, the
reconciler racing the canvas) and a closing step arriving after a cancel change nothing and
call no callback again."""

from __future__ import annotations

from typing import Any

from celery import Celery

from beatflow.runs import close_run
from beatflow.runs.operator import cancel_run
from beatflow.runtime import runtime_of


def test_a_run_closed_twice_is_closed_once_and_a_cancelled_run_stays_cancelled(
    app: Celery,
) -> None:
    runtime = runtime_of(app)
    store = runtime.store
    calls: list[dict[str, Any]] = []
    runtime.dag("t_single").on_failure = lambda **kw: calls.append(kw)
    for run_id in ("twice", "cancelled"):
        store.create_dag_run("t_single", run_id, conf={"sleep": 0.0})
        store.force_task_state(
            "t_single", run_id, "step", state="failed", note="boom", dedupe_key=f"k/{run_id}"
        )
    store.start_queued_dag_runs("t_single", 1)
    assert close_run(runtime, "t_single", "twice") == "failed"
    assert close_run(runtime, "t_single", "twice") == "failed"
    assert [c["run_id"] for c in calls] == ["twice"]

    # the next run was dispatched by the first close; cancel it, then its closing step arrives
    cancel_run(runtime, "t_single", "cancelled", actor="test")
    assert close_run(runtime, "t_single", "cancelled") == "cancelled"
    assert [c["run_id"] for c in calls] == ["twice"]
