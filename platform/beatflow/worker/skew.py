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

from beatflow.dag.model import DAG, TaskSpec
from beatflow.errors import BeatflowError, DeploySkewError
from beatflow.execution.dedupe import default_dedupe_key
from beatflow.execution.send import send_group
from beatflow.runs.reconciler import fail_run
from beatflow.worker import reload
from beatflow.worker.letters import continue_fan_in, fail_unrun, record_final_failure, unrun_letter

if TYPE_CHECKING:
    from beatflow.runtime import Runtime

log = logging.getLogger(__name__)

ROLL_HINT = (
    "the message was sent for another version of the dags folder (deploy skew): roll every "
    "worker and the beat to one version"
)


def resolve_task(runtime: Runtime, dag_id: str, task_id: str) -> tuple[DAG, TaskSpec]:
    """The DAG and task as loaded on this worker (a DAG new to the dags folder is loaded now:
    ``worker/reload.py``); DeploySkewError, with why in full, if either is unknown here."""
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError:
        reload.refresh_for(runtime, f"{dag_id}.{task_id}")
        try:
            dag = runtime.dag(dag_id)
        except BeatflowError as exc:
            raise DeploySkewError(
                f"{reload.not_loaded_reason(runtime, dag_id)}; {ROLL_HINT}"
            ) from exc
    spec = dag.tasks.get(task_id)
    if spec is None:
        raise DeploySkewError(_task_not_in_dag(dag_id, task_id))
    return dag, spec


def _task_not_in_dag(dag_id: str, task_id: str) -> str:
    return (
        f'task "{task_id}" is not in DAG "{dag_id}" as loaded on this worker (a DAG changed '
        "after a worker started reaches it when it restarts); the message was sent for another "
        "version of the dags folder (deploy skew): roll every worker to one version"
    )


def fail_unknown_task(runtime: Runtime, name: str, args: Any, kwargs: Any) -> bool:
    """A message for ``<dag_id>.<task_id>`` that no task is registered for on this worker, even
    after a look at the dags folder (``worker/reload.py``): its message is gone, so no worker
    continues its canvas. Fail its task run with the reason in full, and its DAG run with the
    same reason (its dead letter lets ``beatflow dlq replay`` run it once the cause is gone).
    True if a task run was failed."""
    dag_id, _, task_id = name.partition(".")
    kw = kwargs if isinstance(kwargs, dict) else {}
    pos = list(args) if isinstance(args, list | tuple) else []
    run_id = kw.get("run_id", pos[0] if pos else None)
    raw_index = kw.get("map_index", pos[1] if len(pos) > 1 else None)
    index = raw_index if isinstance(raw_index, int) else -1
    if not dag_id or not task_id or not isinstance(run_id, str):
        return False
    run = runtime.store.get_dag_run(dag_id, run_id)
    if run is None:
        return False
    if dag_id in runtime.dagbag.dags:
        why = _task_not_in_dag(dag_id, task_id)
    else:
        why = f"{reload.not_loaded_reason(runtime, dag_id)}; {ROLL_HINT}"
    error = f'could not run the task: task "{name}" is not registered on this worker: {why}'
    log.error("%s (run %s)", error, run_id)
    fail_unrun(runtime, dag_id, run_id, task_id, index, error)
    reason = f'task "{name}" could not run: it is not registered on this worker: {why}'
    fail_run(runtime, run, reason, action="failed")
    return True


def expand_or_fail(
    runtime: Runtime,
    task: CeleryTask,
    dag_id: str,
    run_id: str,
    what: str,
    build: Callable[[], Signature],
    task_runs: Callable[[], list[tuple[str, int]]],
    *,
    plain: bool = False,
) -> None:
    """Replace ``task`` (a segment or a map chunk) by the canvas ``build`` makes (``plain``: a
    map chunk, whose instances are sent as they are, as its expander sent it, unless a chord
    of an earlier version's expansion waits for it). If it cannot
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
        mapped = set()
        for task_id, index in wanted:
            if index >= 0:
                mapped.add(task_id)
            runtime.store.set_task_state(
                default_dedupe_key(dag_id, run_id, task_id, index),
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                map_index=index,
                state="failed",
                error=f"could not run the task: {skew}",
                letter=unrun_letter(run_id, index),
            )
        for task_id in sorted(mapped):  # the instances failed here may end their fan-in
            fan_in = runtime.store.recount_fan_in(dag_id, run_id, task_id)
            if fan_in is not None:
                continue_fan_in(task.app, fan_in, f"task {task_id!r} of {dag_id}/{run_id}")
        record_final_failure(task, skew)
        return
    if plain and not (task.request.chain or task.request.chord):
        send_group(task.app, sig)  # a slice of a .map(): its fan-in continues the canvas
        return
    task.replace(sig)
