"""The node wrapper: what runs for each task of a DAG run, as one sequence of the pure
decision's actions (``execution/decide.py``) over the worker's small modules: read and claim
(``claim``), run one try (``attempt``), expand a ``.map()`` (``mapping``), close the run
(``closing``), fail for good with a dead letter (``letters``). It never lets the canvas break:
after the last try it records the failure (and a dead letter) and the canvas goes on, so
downstream trigger rules decide. A worker whose lease was taken over stops: it writes nothing
more and continues nothing."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore, Reject, Retry

from beatflow.dag.model import DAG, TaskSpec
from beatflow.errors import InvalidIdError, StoreUnavailableError
from beatflow.execution import backoff, canvas, events
from beatflow.execution.decide import Action, decide
from beatflow.execution.dedupe import default_dedupe_key
from beatflow.execution.options import store_retry_delay
from beatflow.ids import check_run_id
from beatflow.logs import correlation
from beatflow.notify import callbacks
from beatflow.states import DAG_RUN_FINAL
from beatflow.worker import claim, mapping, pools, sensor
from beatflow.worker.attempt import Attempt, execute
from beatflow.worker.closing import Closing, close_here
from beatflow.worker.letters import fail_unrun, record_final_failure
from beatflow.worker.retry import retry_later
from beatflow.worker.skew import resolve_task

if TYPE_CHECKING:
    from beatflow.runtime import Runtime

log = logging.getLogger(__name__)

# How long a wait for upstream rows lasts (the canvas orders work: only a redelivery race waits).
UPSTREAM_WAIT_SECONDS = 1.0


def run_task(
    runtime: Runtime, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, index: int,
    closing: Closing | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """One delivery of a task run, top to bottom: read (and maybe claim), decide, act."""
    store = runtime.store
    read = claim.read(store, task, dag, spec, run_id, index, closing)
    if read.run is None:
        log.error("no DAG run %s/%s in the results database; message dropped", dag.dag_id, run_id)
        return None
    key = claim.dedupe_key_for(spec, dag, read.run, index)
    own_key = default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)
    own = next((t for t in read.rows if t.dedupe_key in (key, own_key)), None)
    situation = claim.situation(task, dag, spec, index, read.rows, own)
    decision = decide(situation)
    if decision.action is Action.DONE and own is not None:
        return mapping.done(runtime, task, dag, spec, run_id, key, own)
    if read.run.state in DAG_RUN_FINAL:  # cancelled, marked, timed out: no task of it starts
        log.info("DAG run %s/%s is %s: task %s not started", dag.dag_id, run_id, read.run.state,
                 spec.task_id)  # fmt: skip
        return None
    if decision.action is Action.WAIT:
        log.info("task %s waits: %s", spec.task_id, decision.reason)
        retry_later(task, UPSTREAM_WAIT_SECONDS)
    if (state := decision.recorded_state) is not None:
        if claim.record_decided(store, dag, spec, run_id, index, decision, state):
            callbacks.task_event(runtime, dag, spec, read.run, state=state, map_index=index,
                            reason=decision.reason, dedupe_key=key)  # fmt: skip
        return events.outcome(state)
    due = backoff.retry_due(own, spec.retry) if own is not None else None
    if early := backoff.early_by(due, datetime.now(UTC)):
        # a retry's message before its try is due (a countdown capped below the broker's
        # limits, a redelivered copy, the reconciler's re-send): wait again, claim nothing
        settings = runtime.settings
        wait = backoff.countdown(early, settings.visibility_timeout, settings.max_countdown_seconds)
        log.info("task run %s: its retry is due in %.1fs; waiting again", key, early)
        retry_later(task, wait)
    got = read.claim or pools.claim_key(store, task, dag, spec, run_id, index, key)
    decision = decide(dataclasses.replace(situation, claim=claim.seen(got, own)))
    if decision.action is Action.DONE:
        record = claim.done_record(store, dag, spec, run_id, index, got, key)
        return mapping.done(runtime, task, dag, spec, run_id, key, record)
    if decision.action is Action.HELD:
        wait = claim.lease_remaining(got.record, runtime.settings.lease_seconds)
        log.info("task run %s is held by %s; retrying in %.1fs", key, got.record.worker, wait)
        retry_later(task, wait)
    assert got.token is not None
    attempt = Attempt(
        runtime, task, dag, spec, read.run, key, got.token, index, got.record.try_number,
        record=got.record, closing=closing, item_only=read.item_only,
    )  # fmt: skip
    if (refused := pools.refusal(got)) or decision.action is Action.FAIL_WORKER_LOST:
        attempt.fail(refused or decision.reason, None, tries=attempt.round_try - 1)
        return None
    if decision.action is Action.EXPAND:
        mapping.expand(attempt)
        return None
    result = execute(attempt, read.rows, sensor.poke if spec.sensor is not None else None)
    return result if closing is None else closing.note_own(got.record, result)


def run_node(
    runtime: Runtime,
    task: CeleryTask,
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int | None,
    *,
    closes: bool = False,
) -> dict[str, Any] | None:
    """Body of the Celery task ``<dag_id>.<task_id>``. ``closes``: this is the run's closing
    task (``dag.compile.closing_task``): once its task run is final, close the DAG run here.
    Returns the task run's outcome for Celery's task-succeeded event (``events.outcome``), or
    None when this delivery recorded nothing (no such run, a run already ended)."""
    problem = malformed_message(run_id, map_index)
    if problem is not None:
        # No beatflow sender makes such a message (a hostile or corrupted publish): none of it
        # becomes a key, a log field or SQL; it is dropped with the reason.
        log.error("malformed message for %s dropped: %s", task.name, problem)
        raise Reject(problem, requeue=False)
    index = -1 if map_index is None else map_index
    with correlation(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        celery_task_id=task.request.id,
        map_index=index,
    ):
        result = None
        closing = Closing() if closes else None
        try:
            dag, spec = resolve_task(runtime, dag_id, task_id)
            result = run_task(runtime, task, dag, spec, run_id, index, closing)
        except StoreUnavailableError as exc:
            delay = store_retry_delay(task.request.retries)
            log.warning("results database unavailable (%s); retrying in %.1fs", exc, delay)
            retry_later(task, delay, exc)
        except (Retry, Ignore, Reject):
            raise  # Celery's own control flow: retry later, replaced by a canvas, stopped
        except Exception as exc:  # noqa: BLE001 - the canvas must never break (see module doc)
            if not canvas.is_continued(task):  # a final failure already recorded and continued
                _record_broken(runtime, dag_id, task_id, run_id, index, exc)
            if closes:
                close_here(runtime, task, dag_id, run_id)
            record_final_failure(task, exc)
        if closing is not None:
            return close_here(runtime, task, dag_id, run_id, closing, result)
        return result


def malformed_message(run_id: object, map_index: object) -> str | None:
    """Why a node message's arguments cannot be beatflow's, or None when they can be."""
    try:
        check_run_id(run_id)
    except InvalidIdError as exc:
        return str(exc)
    if map_index is not None and (type(map_index) is not int or map_index < -1):
        return f"map index must be an integer of -1 or more, got {type(map_index).__name__}"
    return None


def _record_broken(
    runtime: Runtime, dag_id: str, task_id: str, run_id: str, index: int, exc: Exception
) -> None:
    """Something beatflow did not expect (a DAG or task unknown on this worker, a bad dedupe key
    template, a store refusal): record the task run failed with the reason, whatever lease it
    had, so the DAG run still ends instead of hanging in "running"; its dead letter lets
    ``beatflow dlq replay`` run it again once the cause is gone."""
    error = f"{type(exc).__name__}: {exc}"
    log.exception("task %s could not be run: %s", task_id, error)
    reason, tb = f"could not run the task: {error}", traceback.format_exc()
    fail_unrun(runtime, dag_id, run_id, task_id, index, reason, tb)
