"""The node wrapper: what runs for each task of a DAG run. It claims the task run's dedupe key,
applies the trigger rule, reads inputs from the store, runs the function with retries, writes the
result, and never lets the canvas break: after the last try it records the failure (and a dead
letter) and returns, so downstream trigger rules decide."""

from __future__ import annotations

import logging
import random
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore, Reject, Retry

from beatflow.dag.authoring import _context
from beatflow.dag.compile import map_signatures
from beatflow.dag.model import DAG, Ref, TaskSpec
from beatflow.errors import InvalidIdError, ResultError, StoreUnavailableError
from beatflow.execution import events, rules
from beatflow.execution.context import TaskContext, make_logger
from beatflow.execution.options import store_retry_delay
from beatflow.ids import check_run_id
from beatflow.logs import correlation

if TYPE_CHECKING:
    from beatflow.runtime import Runtime
    from beatflow.store import DagRunRecord, Store, TaskRunRecord

log = logging.getLogger(__name__)

UPSTREAM_WAIT_RETRIES = 20
# A task run whose worker died (SIGKILL, OOM, hard time limit) is taken over and run again, up
# to this many times beyond its own retries; then it is dead-lettered instead of looping forever.
WORKER_LOST_TRIES = 2


def default_dedupe_key(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    key = f"{dag_id}/{run_id}/{task_id}"
    return key if map_index < 0 else f"{key}[{map_index}]"


def dedupe_key_for(spec: TaskSpec, dag: DAG, run: DagRunRecord, map_index: int) -> str:
    if spec.dedupe_key is None:
        return default_dedupe_key(dag.dag_id, run.run_id, spec.task_id, map_index)
    fields = {
        "dag_id": dag.dag_id,
        "run_id": run.run_id,
        "task_id": spec.task_id,
        "map_index": map_index,
        "logical_date": run.logical_date.isoformat() if run.logical_date else "",
        "params": run.conf,
    }
    if callable(spec.dedupe_key):
        return str(spec.dedupe_key(**fields))
    return spec.dedupe_key.format(**fields)


def malformed_message(run_id: object, map_index: object) -> str | None:
    """Why a node message's arguments cannot be beatflow's, or None when they can be."""
    try:
        check_run_id(run_id)
    except InvalidIdError as exc:
        return str(exc)
    if map_index is not None and (type(map_index) is not int or map_index < -1):
        return f"map index must be an integer of -1 or more, got {type(map_index).__name__}"
    return None


def run_node(
    runtime: Runtime, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, map_index: int | None
) -> None:
    """Body of the Celery task ``<dag_id>.<task_id>``."""
    problem = malformed_message(run_id, map_index)
    if problem is not None:
        # No beatflow sender makes such a message (a hostile or corrupted publish): none of it
        # becomes a key, a log field or SQL; it is dropped with the reason.
        log.error("malformed message for %s dropped: %s", task.name, problem)
        raise Reject(problem, requeue=False)
    index = -1 if map_index is None else map_index
    with correlation(
        dag_id=dag.dag_id,
        run_id=run_id,
        task_id=spec.task_id,
        celery_task_id=task.request.id,
        map_index=index,
    ):
        try:
            _run(runtime, task, dag, spec, run_id, index)
        except StoreUnavailableError as exc:
            delay = store_retry_delay(task.request.retries)
            log.warning("results database unavailable (%s); retrying in %.1fs", exc, delay)
            raise task.retry(countdown=delay, exc=exc) from exc
        except (Retry, Ignore, Reject):
            raise  # Celery's own control flow: retry later, replaced by a canvas
        except Exception as exc:  # noqa: BLE001 - the canvas must never break (see module doc)
            _record_broken(runtime, dag, spec, run_id, index, exc)


def _record_broken(
    runtime: Runtime, dag: DAG, spec: TaskSpec, run_id: str, index: int, exc: Exception
) -> None:
    """Something beatflow did not expect (a bad dedupe key template, a store refusal): record
    the task run as failed with the reason and let the canvas go on, so the DAG run still
    closes (as failed) instead of hanging in "running"."""
    error = f"{type(exc).__name__}: {exc}"
    log.exception("task %s could not be run: %s", spec.task_id, error)
    key = default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)
    runtime.store.set_task_state(
        key,
        dag_id=dag.dag_id,
        run_id=run_id,
        task_id=spec.task_id,
        map_index=index,
        state="failed",
        error=f"could not run the task: {error}",
    )
    events.task_run_finished(dag.dag_id, spec.task_id, "failed")


def _run(
    runtime: Runtime, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, index: int
) -> None:
    store = runtime.store
    run = store.get_dag_run(dag.dag_id, run_id)
    if run is None:
        log.error("no DAG run %s/%s in the results database; message dropped", dag.dag_id, run_id)
        return
    key = dedupe_key_for(spec, dag, run, index)
    # Read only this task's and its upstream's rows: a wide DAG must not make every task read
    # every row of its run (the sink of a 10,000-wide fan-in reads them once, unfiltered).
    wanted = spec.upstream | {spec.task_id}
    task_runs = store.get_task_runs(dag.dag_id, run_id, wanted if len(wanted) <= 500 else None)
    existing = next((t for t in task_runs if t.dedupe_key == key), None)
    if existing is None or existing.state not in rules.DONE:
        decision = _decide(task, spec, task_runs, index)
        if decision != "run":
            store.set_task_state(
                key,
                dag_id=dag.dag_id,
                run_id=run_id,
                task_id=spec.task_id,
                map_index=index,
                state=decision,
            )
            log.info("task %s %s by trigger rule %s", spec.task_id, decision, spec.trigger_rule)
            events.task_run_finished(dag.dag_id, spec.task_id, decision)
            return
    claim = store.claim_task_run(
        key,
        dag_id=dag.dag_id,
        run_id=run_id,
        task_id=spec.task_id,
        map_index=index,
        worker=task.request.hostname,
        celery_task_id=task.request.id,
    )
    if claim.outcome == "done":
        events.duplicate_delivery(dag.dag_id, spec.task_id)
        log.info("task run %s already %s; not running it again", key, claim.record.state)
        if spec.map_over and index < 0 and claim.record.state == "success":
            _replace_with_instances(task, dag, spec, run_id, claim.record)
        return
    if claim.outcome == "held":
        wait = _lease_remaining(claim.record, runtime.settings.lease_seconds)
        log.info("task run %s is held by %s; retrying in %.1fs", key, claim.record.worker, wait)
        raise task.retry(countdown=wait)
    assert claim.token is not None
    attempt = Attempt(
        runtime, task, dag, spec, run, key, claim.token, index, claim.record.try_number
    )
    taken_over = existing is not None and existing.state == "running"
    lost = attempt.try_number - 1
    if taken_over and attempt.try_number > spec.retry.retries + 1 + WORKER_LOST_TRIES:
        # Earlier tries died with their worker (OOM, hard time limit): stop the loop (celery#1628).
        attempt.fail(
            f"worker lost {lost} times (killed, out of memory or past its hard time "
            "limit); giving up",
            None,
            tries=lost,
        )
        return
    if spec.map_over and index < 0:
        _expand(attempt)
        return
    _execute(attempt, task_runs)


def _decide(
    task: CeleryTask, spec: TaskSpec, task_runs: list[TaskRunRecord], index: int
) -> rules.Decision:
    upstream = spec.upstream
    if not upstream:
        return "run"
    states = [t.state for t in task_runs if t.task_id in upstream and not _is_expander(t, spec)]
    seen = {t.task_id for t in task_runs if t.task_id in upstream and t.state in rules.DONE}
    if seen != upstream or any(s not in rules.DONE for s in states):
        # The canvas orders work, so this only happens after a redelivery race: wait a little.
        if task.request.retries < UPSTREAM_WAIT_RETRIES:
            raise task.retry(countdown=1.0)
        return "upstream_failed"
    return rules.decide(spec.trigger_rule, states)


def _is_expander(record: TaskRunRecord, spec: TaskSpec) -> bool:
    # A mapped upstream's own row (map_index -1, state success) only says it expanded; its
    # instances carry the states that count. An expander that did not expand counts as itself.
    return (
        record.map_index < 0
        and record.state == "success"
        and isinstance(record.result, dict)
        and "map_count" in record.result
    )


def _lease_remaining(record: TaskRunRecord, lease_seconds: float) -> float:
    from datetime import UTC, datetime

    if record.lease_expires_at is None:
        return lease_seconds
    left = (record.lease_expires_at - datetime.now(UTC)).total_seconds()
    return max(0.5, min(lease_seconds, left + 0.2))


def _inputs(
    store: Store, dag: DAG, spec: TaskSpec, run_id: str, index: int, task_runs: list[TaskRunRecord]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    results: dict[str, Any] = {}
    instances: dict[str, list[tuple[int, Any]]] = {}
    for t in task_runs:
        if t.map_index >= 0:
            instances.setdefault(t.task_id, []).append((t.map_index, t.result))
        else:
            results[t.task_id] = t.result
    for task_id, items in instances.items():
        results[task_id] = [value for _, value in sorted(items, key=lambda p: p[0])]
    for task_id, spec_up in dag.tasks.items():
        if spec_up.map_over and task_id not in instances and task_id in results:
            results[task_id] = []  # mapped over an empty list

    def resolve(value: Any) -> Any:
        if isinstance(value, Ref):
            return results.get(value.task_id)
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, tuple):
            return tuple(resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    args = tuple(resolve(a) for a in spec.args)
    kwargs = {k: resolve(v) for k, v in spec.kwargs.items()}
    if spec.map_over:
        items = results.get(spec.map_over) or []
        args = (items[index], *args)
    return args, kwargs


@dataclass(frozen=True, slots=True)
class Attempt:
    """One claimed try of a task run: everything needed to run it and record its outcome."""

    runtime: Runtime
    task: CeleryTask
    dag: DAG
    spec: TaskSpec
    run: DagRunRecord
    key: str  # the dedupe key
    token: str  # the lease token from the claim
    index: int  # map index, -1 when not mapped
    try_number: int

    def finish(self, state: str, **outcome: Any) -> None:
        _finish(self.runtime.store, self.key, self.token, state=state, **outcome)

    def fail(self, error: str, tb: str | None, *, tries: int | None = None) -> None:
        """Record the final failure and a dead letter; the canvas goes on."""
        tries = self.try_number if tries is None else tries
        self.finish("failed", error=error, traceback=tb)
        self.runtime.store.add_dead_letter(
            dedupe_key=self.key,
            dag_id=self.dag.dag_id,
            run_id=self.run.run_id,
            task_id=self.spec.task_id,
            map_index=self.index,
            args={"run_id": self.run.run_id, "map_index": self.index},
            conf=dict(self.run.conf),
            error=error,
            traceback=tb,
            tries=tries,
        )
        log.error(
            "task run %s failed after %d tries: %s; dead letter recorded", self.key, tries, error
        )
        events.task_run_finished(self.dag.dag_id, self.spec.task_id, "failed")
        self.callback(self.spec.on_failure, error)

    def callback(self, fn: Any, error: str) -> None:
        if fn is None:
            return
        try:
            fn(
                dag_id=self.dag.dag_id,
                run_id=self.run.run_id,
                task_id=self.spec.task_id,
                error=error,
            )
        except Exception:  # noqa: BLE001 - a user's callback must not change the outcome
            log.exception("callback %r raised", fn)


def _execute(attempt: Attempt, task_runs: list[TaskRunRecord]) -> None:
    a = attempt
    dag, spec, run = a.dag, a.spec, a.run
    args, kwargs = _inputs(a.runtime.store, dag, spec, run.run_id, a.index, task_runs)
    ctx = TaskContext(
        dag_id=dag.dag_id,
        run_id=run.run_id,
        task_id=spec.task_id,
        map_index=a.index,
        try_number=a.try_number,
        dedupe_key=a.key,
        logical_date=run.logical_date,
        params=run.conf,
        celery_task_id=a.task.request.id,
        log=make_logger(dag.dag_id),
    )
    if spec.wants_context:
        kwargs["ctx"] = ctx
    a.runtime.leases.hold(a.key, a.token)
    started = time.perf_counter()
    ctx_token = _context.set(ctx)
    try:
        with correlation(try_number=a.try_number, dedupe_key=a.key):
            log.info(
                "task run %s started (try %d of %d)", a.key, a.try_number, spec.retry.retries + 1
            )
            try:
                result = spec.fn(*args, **kwargs)
            except Retry:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: anything may go wrong
                _handle_failure(a, exc)
                return
            try:
                a.finish("success", result=result)
            except ResultError as exc:
                a.fail(str(exc), traceback.format_exc())
                return
            elapsed = time.perf_counter() - started
            log.info("task run %s succeeded in %.3fs", a.key, elapsed)
            events.task_run_finished(dag.dag_id, spec.task_id, "success", elapsed)
    finally:
        _context.reset(ctx_token)
        a.runtime.leases.release(a.key)


def _handle_failure(attempt: Attempt, exc: Exception) -> None:
    error = f"{type(exc).__name__}: {exc}"
    tb = traceback.format_exc()
    spec = attempt.spec
    if attempt.try_number <= spec.retry.retries:
        delay = spec.retry.delay_for(attempt.try_number, random.random())
        attempt.finish("up_for_retry", error=error, traceback=tb)
        log.warning(
            "task run %s failed on try %d (%s); retrying in %.2fs",
            attempt.key,
            attempt.try_number,
            error,
            delay,
        )
        events.task_run_finished(attempt.dag.dag_id, spec.task_id, "up_for_retry")
        attempt.callback(spec.on_retry, error)
        raise attempt.task.retry(countdown=delay)
    attempt.fail(error, tb)


def _finish(
    store: Store,
    key: str,
    token: str,
    *,
    state: str,
    result: Any = None,
    error: str | None = None,
    traceback: str | None = None,
    deadline: float = 60.0,
) -> None:
    """Record the outcome; while the database is down keep trying (with backoff) for up to
    ``deadline`` seconds before giving the message back to the broker."""
    give_up = time.monotonic() + deadline
    attempt = 0
    while True:
        try:
            store.finish_task_run(
                key, token, state=state, result=result, error=error, traceback=traceback
            )
            return
        except StoreUnavailableError:
            attempt += 1
            if time.monotonic() > give_up:
                raise
            delay = min(5.0, 0.2 * 2**attempt)
            log.warning(
                "results database unavailable while recording %s; retry in %.1fs", key, delay
            )
            time.sleep(delay)


def _expand(attempt: Attempt) -> None:
    a = attempt
    store = a.runtime.store
    assert a.spec.map_over is not None
    values = _collect(store.get_task_runs(a.dag.dag_id, a.run.run_id, [a.spec.map_over]))
    if not isinstance(values, list):
        a.fail(f'.map() needs a list from "{a.spec.map_over}", got {type(values).__name__}', None)
        return
    a.finish("success", result={"map_count": len(values)})
    record = store.get_task_run(a.key)
    assert record is not None
    _replace_with_instances(a.task, a.dag, a.spec, a.run.run_id, record)


def _collect(records: list[TaskRunRecord]) -> Any:
    instances = sorted((t for t in records if t.map_index >= 0), key=lambda t: t.map_index)
    if instances:
        return [t.result for t in instances]
    own = [t for t in records if t.map_index < 0]
    if own and isinstance(own[0].result, dict) and "map_count" in own[0].result:
        return []
    return own[0].result if own else None


def _replace_with_instances(
    task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, record: TaskRunRecord
) -> None:
    count = int(record.result["map_count"]) if isinstance(record.result, Mapping) else 0
    if count == 0:
        return
    log.info("task %s expands into %d mapped task runs", spec.task_id, count)
    task.replace(map_signatures(task.app, dag, spec.task_id, run_id, 0, count))
