"""``beatflow.finish_run``: the last task of every DAG run's canvas; it closes the run from its
task runs' states (see :func:`beatflow.runs.lifecycle.close_run`)."""

from __future__ import annotations

from celery import Celery
from celery import Task as CeleryTask

from beatflow.dag.compile import FINISH_TASK
from beatflow.errors import StoreUnavailableError
from beatflow.execution.options import TASK_OPTIONS, store_retry_delay
from beatflow.runs.lifecycle import close_run
from beatflow.runtime import runtime_of


def register(app: Celery) -> None:
    """Register ``beatflow.finish_run`` on ``app``."""

    @app.task(name=FINISH_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def finish_run(self: CeleryTask, dag_id: str, run_id: str) -> str:
        runtime = runtime_of(self.app)
        try:
            return close_run(runtime, dag_id, run_id)
        except StoreUnavailableError as exc:
            raise self.retry(countdown=store_retry_delay(self.request.retries), exc=exc) from exc
