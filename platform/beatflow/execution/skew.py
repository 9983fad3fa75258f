"""Deploy skew: a message made by another version of the dags folder (a rolled deploy) names a
DAG, task or plan part this worker does not have. The task runs it stands for end ``failed``
(each with its dead letter, for ``beatflow dlq replay`` once the roll is done) with a reason
that says so, and the canvas goes on, so the DAG run ends instead of hanging."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import Task as CeleryTask
from celery.canvas import Signature

from beatflow.execution import events
from beatflow.execution.node import DeploySkewError, default_dedupe_key, record_final_failure
from beatflow.store import DeadLetterDraft

if TYPE_CHECKING:
    from beatflow.runtime import Runtime

log = logging.getLogger(__name__)

ROLL_HINT = (
    "the message was sent for another version of the dags folder (deploy skew): roll every "
    "worker and the beat to one version"
)


def fail_unknown_task(runtime: Runtime, name: str, args: Any, kwargs: Any) -> bool:
    """A message for ``<dag_id>.<task_id>`` that no task is registered for on this worker:
    fail its task run with the reason. True if a task run was failed."""
    dag_id, _, task_id = name.partition(".")
    kw = kwargs if isinstance(kwargs, dict) else {}
    pos = list(args) if isinstance(args, list | tuple) else []
    run_id = kw.get("run_id", pos[0] if pos else None)
    raw_index = kw.get("map_index", pos[1] if len(pos) > 1 else None)
    index = raw_index if isinstance(raw_index, int) else -1
    if not dag_id or not task_id or not isinstance(run_id, str):
        return False
    if runtime.store.get_dag_run(dag_id, run_id) is None:
        return False
    error = f'could not run the task: task "{name}" is not registered on this worker; {ROLL_HINT}'
    log.error("%s (run %s)", error, run_id)
    runtime.store.fail_task_run(
        default_dedupe_key(dag_id, run_id, task_id, index),
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=index,
        error=error,
        letter=DeadLetterDraft(args={"run_id": run_id, "map_index": index}, conf={}, tries=0),
    )
    events.task_run_finished(dag_id, task_id, "failed")
    return True


def expand_or_fail(
    runtime: Runtime,
    task: CeleryTask,
    dag_id: str,
    run_id: str,
    what: str,
    build: Callable[[], Signature],
    task_runs: Callable[[], list[tuple[str, int]]],
) -> None:
    """Replace ``task`` (a segment or a map chunk) by the canvas ``build`` makes. If it cannot
    be built here (DAG, task or plan part unknown or changed on this worker), fail the task runs
    ``task_runs`` names that have no row yet, continue the canvas and record FAILURE."""
    try:
        sig = build()
    except Exception as exc:  # noqa: BLE001 - any mismatch between message and loaded DAG
        skew = DeploySkewError(
            f"{what} of DAG run {dag_id}/{run_id} cannot be expanded ({exc}); {ROLL_HINT}"
        )
        log.error("%s", skew)
        try:
            wanted = task_runs()
        except Exception:  # noqa: BLE001 - the DAG itself is unknown here: nothing to name
            wanted = []
        for task_id, index in wanted:
            runtime.store.set_task_state(
                default_dedupe_key(dag_id, run_id, task_id, index),
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                map_index=index,
                state="failed",
                error=f"could not run the task: {skew}",
                letter=DeadLetterDraft(
                    args={"run_id": run_id, "map_index": index}, conf={}, tries=0
                ),
            )
        record_final_failure(task, skew)
        return
    task.replace(sig)
