"""``.map()``: a mapped task's own task run records how many instances it expands into, then
sends them as a plain group; the instance that ends last sends what follows (its fan-in). A
task run already final reports itself as a duplicate (a redelivered expander sends its
instances again, each deduped)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore, Reject, Retry

from beatflow.dag.compile import map_signatures
from beatflow.dag.model import DAG, TaskSpec
from beatflow.execution import canvas, events
from beatflow.execution.options import store_retry_delay
from beatflow.execution.send import send_group
from beatflow.states import TaskRunState
from beatflow.worker.claim import reads_item
from beatflow.worker.inputs import upstream_results
from beatflow.worker.retry import retry_later

if TYPE_CHECKING:
    from beatflow.runtime import Runtime
    from beatflow.store import TaskRunRecord
    from beatflow.worker.attempt import Attempt

log = logging.getLogger(__name__)


def expand(attempt: Attempt) -> None:
    """A .map() task's own task run: record how many instances it expands into (out of band,
    ``map_count``), then send them. The count is recorded before any instance runs, and
    downstream waits for exactly that many final instances: never a partial list."""
    a = attempt
    assert a.spec.map_over is not None
    rows = a.runtime.store.get_task_runs(a.dag.dag_id, a.run.run_id, [a.spec.map_over])
    values = upstream_results(a.dag, rows).get(a.spec.map_over)
    if not isinstance(values, list):
        a.fail(f'.map() needs a list from "{a.spec.map_over}", got {type(values).__name__}', None)
        return
    if reads_item(a.dag, a.spec, a.run.run_id, 0):  # written before any instance is sent
        a.runtime.store.record_map_items(a.dag.dag_id, a.run.run_id, a.spec.task_id, values)
    a.finish("success", result=None, map_count=len(values))
    fan_out(a.runtime, a.task, a.dag, a.spec, a.run.run_id, len(values))


def done(
    runtime: Runtime,
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    key: str,
    record: TaskRunRecord,
) -> dict[str, Any]:
    """A task run already final: nothing runs, its outcome is reported as a duplicate."""
    log.info("task run %s already %s; not running it again", key, record.state)
    count = record.map_count or 0
    if spec.map_over and record.map_index < 0 and record.state == TaskRunState.SUCCESS and count:
        # a redelivered expander (a resume, a clear) recounts its fan-in and sends the instances
        # again (each is deduped), or continues its canvas when they have all ended
        fan_out(runtime, task, dag, spec, run_id, count)
    return events.outcome(record.state, duplicate=True)


def fan_out(
    runtime: Runtime, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, count: int
) -> None:
    """Send a .map() task's ``count`` instances as a plain group (no chord): the canvas that
    follows the expander is stored with its fan-in first (``store.open_fan_in``), and the
    worker whose instance ends last sends it (``letters.continue_fan_in``). When every
    instance has ended already (a redelivered expander), the expander's own canvas goes on."""
    if count == 0:
        return
    if runtime.store.open_fan_in(dag.dag_id, run_id, spec.task_id, count, canvas.captured(task)):
        log.info("the %d instances of %s have all ended; continuing", count, spec.task_id)
        return
    log.info("task %s expands into %d mapped task runs", spec.task_id, count)
    try:
        send_group(task.app, map_signatures(task.app, dag, spec.task_id, run_id, 0, count))
    except (Ignore, Retry, Reject):
        raise
    except Exception as exc:  # noqa: BLE001 - the broker refused: send the instances again later
        log.warning("could not send the instances of %s (%s); retrying", spec.task_id, exc)
        retry_later(task, store_retry_delay(task.request.retries), exc)
    canvas.detach(task)  # what follows is the fan-in's to send
