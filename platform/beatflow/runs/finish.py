"""``beatflow.finish_run``: the last task of every DAG run's canvas; it closes the run from its
task runs' states (see :func:`beatflow.runs.lifecycle.close_run`). While the results database is
unreachable Celery retries it (``autoretry_for``) with exponential backoff and full jitter."""

from __future__ import annotations

from celery import Celery
from celery import Task as CeleryTask

from beatflow.dag.compile import FINISH_TASK
from beatflow.errors import StoreUnavailableError
from beatflow.execution.options import STORE_RETRY_MAX_DELAY, TASK_OPTIONS
from beatflow.runs.lifecycle import close_run
from beatflow.runtime import runtime_of

STORE_AUTORETRY: dict[str, object] = {
    "autoretry_for": (StoreUnavailableError,),
    "retry_backoff": True,
    "retry_backoff_max": int(STORE_RETRY_MAX_DELAY),
    "retry_jitter": True,
}


def register(app: Celery) -> None:
    """Register ``beatflow.finish_run`` on ``app``."""

    @app.task(name=FINISH_TASK, **TASK_OPTIONS, **STORE_AUTORETRY)  # type: ignore[untyped-decorator]
    def finish_run(self: CeleryTask, dag_id: str, run_id: str) -> str:
        return close_run(runtime_of(self.app), dag_id, run_id)
