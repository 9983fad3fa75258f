"""The node wrapper's Celery adapter: what runs for each task of a DAG run. It reads the records,
asks the pure decision (``execution/decide.py``) what to do, and performs the effects: claim the
dedupe key, record a trigger-rule outcome, run the function under a lease, write the result,
expand a ``.map()``, retry through Celery. It never lets the canvas break: after the last try it
records the failure (and a dead letter) and the canvas goes on, so downstream trigger rules
decide. A worker whose lease was taken over stops: it writes nothing more and continues nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import tenacity
from celery import Celery
from celery import Task as CeleryTask
from celery.exceptions import Ignore, Reject, Retry

from beatflow.dag.authoring import _context
from beatflow.dag.compile import FINISH_TASK, map_signatures
from beatflow.dag.model import DAG, Ref, TaskSpec, map_leaves
from beatflow.errors import (
    BeatflowError,
    InvalidIdError,
    ResultError,
    StoreUnavailableError,
    TaskRunFailedError,
)
from beatflow.execution import canvas, events, rules
from beatflow.execution.context import TaskContext, make_logger
from beatflow.execution.decide import Action, ClaimSeen, Situation, decide
from beatflow.execution.decide import run_outcome as decide_run_outcome
from beatflow.execution.options import store_retry_delay
from beatflow.execution.send import send_group
from beatflow.ids import check_run_id
from beatflow.logs import correlation
from beatflow.states import DAG_RUN_FINAL, TaskRunState
from beatflow.store import DeadLetterDraft, FinishedRun, TaskRunEnded

if TYPE_CHECKING:
    from beatflow.runtime import Runtime
    from beatflow.store import Claim, DagRunRecord, Store, TaskRunRecord

log = logging.getLogger(__name__)

# How long a wait for upstream rows lasts (the canvas orders work: only a redelivery race waits).
UPSTREAM_WAIT_SECONDS = 1.0
# No sleep inside a worker slot lasts longer than this (in-process waits between write tries).
MAX_SLEEP_SECONDS = 1.0
# A closing task reads every task run of its run with its own when the run has at most this
# many (then closing the run needs no read of its own).
MAX_WHOLE_RUN_KEYS = 200


class DeploySkewError(BeatflowError):
    """Raised when a message names a DAG or task this worker does not have (a rolled deploy)."""


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


def resolve_task(runtime: Runtime, dag_id: str, task_id: str) -> tuple[DAG, TaskSpec]:
    """The DAG and task as loaded on this worker; DeploySkewError if either is unknown here."""
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError as exc:
        raise DeploySkewError(
            f'DAG "{dag_id}" is not loaded on this worker ({exc}); the message was sent for '
            "another version of the dags folder (deploy skew): roll every worker to one version"
        ) from exc
    spec = dag.tasks.get(task_id)
    if spec is None:
        raise DeploySkewError(
            f'task "{task_id}" is not in DAG "{dag_id}" as loaded on this worker; the message was '
            "sent for another version of the dags folder (deploy skew): roll every worker to one "
            "version"
        )
    return dag, spec


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
            result = _run(runtime, task, dag, spec, run_id, index, closing)
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


@dataclass(slots=True)
class Closing:
    """What a run's closing task learns on its way that closing the run can use: every task
    run of the run (``rows``, read with its own; set when the read covered the whole run) and
    its own row once final (``own``)."""

    rows: list[TaskRunRecord] | None = None
    own: TaskRunRecord | None = None
    # the task's own finish also ended the run: the run as it ended, the waiting runs started
    closed: DagRunRecord | None = None
    started: tuple[DagRunRecord, ...] = ()

    def tasks(self) -> list[TaskRunRecord] | None:
        """Every task run of the run as it stands, when known without reading."""
        return None if self.own is None else self.tasks_with(self.own)

    def tasks_with(self, own: TaskRunRecord) -> list[TaskRunRecord] | None:
        """Every task run of the run with ``own`` as the task's own row, when the read covered
        the whole run."""
        if self.rows is None:
            return None
        others = [t for t in self.rows if (t.task_id, t.map_index) != (own.task_id, own.map_index)]
        return [*others, own]


def close_here(
    runtime: Runtime,
    task: CeleryTask,
    dag_id: str,
    run_id: str,
    closing: Closing | None = None,
    result: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Close the DAG run from its closing task, in process; returns ``result`` (the task's
    outcome) with the run's final state added when this call ended the run (Celery's
    task-succeeded event carries both; without a ``result`` the DAG-run event is sent). When
    the results database blipped, send ``beatflow.finish_run`` instead (Celery retries it);
    when even that cannot be sent, or anything else went wrong, the reconciler closes the run
    (its task runs are final)."""
    closed: list[DagRunRecord] = []
    try:
        runtime.close_run(
            dag_id,
            run_id,
            tasks=closing.tasks() if closing is not None else None,
            on_closed=closed.append if result is not None else None,
            closed=closing.closed if closing is not None else None,
            started=closing.started if closing is not None else (),
        )
        if closed and result is not None:
            run = closed[0]
            return events.outcome(
                result[events.OUTCOME_KEY],
                duplicate=bool(result.get("duplicate")),
                dag_run=run.state,
                dag_run_seconds=run.duration_seconds,
            )
        return result
    except StoreUnavailableError as exc:
        log.warning(
            "could not close DAG run %s/%s in its closing task (%s); sending %s",
            dag_id,
            run_id,
            exc,
            FINISH_TASK,
        )
    except Exception:
        log.exception("could not close DAG run %s/%s; the reconciler closes it", dag_id, run_id)
        return result
    try:
        task.app.send_task(FINISH_TASK, args=(dag_id, run_id), ignore_result=True)
    except Exception:
        log.exception("could not send %s for %s/%s", FINISH_TASK, dag_id, run_id)
    return result


def record_final_failure(task: CeleryTask, exc: BaseException) -> None:
    """THE final-failure path of the adapter, the one place a task run that failed for good
    (already recorded ``failed`` in the store) is handed back to Celery: its canvas goes on (so
    downstream trigger rules decide) and ``exc`` is raised, so Celery records FAILURE (see
    ``execution/canvas.py``). Every final failure (the task's last try, a result that cannot be
    stored, a worker lost too often, a broken DAG on this worker) ends here."""
    canvas.fail_for_good(task, exc)


def retry_later(task: CeleryTask, countdown: float, exc: BaseException | None = None) -> NoReturn:
    """Retry this message through Celery in ``countdown`` seconds. When the retry cannot be
    published (the broker refuses: Celery raises Reject(requeue=False), which would drop the
    message), give the message back to the broker instead (requeue), after at most a second:
    it runs again and its task run's row (running, up_for_retry) tells it where it was."""
    try:
        raise task.retry(countdown=countdown, exc=exc)
    except Reject as rejected:
        if rejected.requeue:
            raise
        log.warning(
            "could not publish the retry of %s (%s); giving the message back to the broker",
            task.name,
            rejected.reason,
        )
        time.sleep(min(MAX_SLEEP_SECONDS, max(0.0, countdown)))
        raise Reject(rejected.reason, requeue=True) from None


def _record_broken(
    runtime: Runtime, dag_id: str, task_id: str, run_id: str, index: int, exc: Exception
) -> None:
    """Something beatflow did not expect (a DAG or task unknown on this worker, a bad dedupe key
    template, a store refusal): record the task run failed with the reason, whatever lease it
    had (a conditional update), so the DAG run still ends instead of hanging in "running"."""
    error = f"{type(exc).__name__}: {exc}"
    log.exception("task %s could not be run: %s", task_id, error)
    key = default_dedupe_key(dag_id, run_id, task_id, index)
    reason, tb = f"could not run the task: {error}", traceback.format_exc()
    # A task run failed for good is a dead letter, whatever failed it (written with the row):
    # once the cause is gone (the rollout finished, the template fixed) `beatflow dlq replay`
    # runs it again.
    ended = runtime.store.fail_task_run(
        key,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=index,
        error=reason,
        traceback=tb,
        letter=DeadLetterDraft(args={"run_id": run_id, "map_index": index}, conf={}, tries=0),
    )
    events.task_run_finished(dag_id, task_id, "failed")
    if ended.fan_in is not None:
        continue_fan_in(runtime.app, ended.fan_in, f"task run {key}")


def _row_keys(dag: DAG, spec: TaskSpec, run_id: str, index: int) -> list[str] | None:
    """The dedupe keys of the rows a task reads (its own, its upstream's) when all are default
    keys (then they are found by the unique key index); None when a custom key or a mapped
    upstream (whose instances count) makes them unknowable before reading."""
    if spec.dedupe_key is not None:
        return None
    keys = [default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)]
    for task_id in spec.upstream:
        up = dag.tasks.get(task_id)
        if up is None or up.map_over or up.dedupe_key is not None:
            return None
        keys.append(default_dedupe_key(dag.dag_id, run_id, task_id))
    return keys


@functools.cache
def _claims_when_ready(trigger_rule: str, upstream: int) -> bool:
    """Whether the task claims once every upstream task succeeded (its trigger rule runs then):
    then the read may claim in the same statement when it finds exactly that (``read_and_claim``
    inserts only for an active run, all upstream rows succeeded and no row of its own, where
    ``decide`` says CLAIM and the claim's insert gives ``run`` at try 1)."""
    return rules.decide(trigger_rule, [TaskRunState.SUCCESS] * upstream) == "run"


def _mapped_upstream(dag: DAG, spec: TaskSpec) -> set[str]:
    return {u for u in spec.upstream if u in dag.tasks and dag.tasks[u].map_over}


def _read(
    store: Store,
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    index: int,
    closing: Closing | None,
) -> tuple[DagRunRecord | None, list[TaskRunRecord], Claim | None, bool]:
    """The DAG run, the rows this task needs, the claim when the read could make it, and
    whether a mapped instance's read gave only its own item of its source's list."""
    # One statement reads the run and the rows this task needs: its upstream's and its own (a
    # mapped instance never reads its siblings; a 10,000-wide fan-in reads its run once). When
    # the rows make the claim certain, the same statement claims (see _claims_when_ready). A
    # closing task reads every task run of a small run with them, to close it without a read.
    # A mapped instance reads only its own item of the list it maps over, and its expander's
    # row for the number of items (see _map_item).
    keys = _row_keys(dag, spec, run_id, index)
    whole = _whole_run_keys(dag, run_id) if closing is not None and keys is not None else None
    item = _map_item(dag, spec, run_id, index) if keys is not None else None
    also = whole or ([default_dedupe_key(dag.dag_id, run_id, spec.task_id)] if item else None)
    claim = None
    if keys is not None and _claims_when_ready(spec.trigger_rule, len(spec.upstream)):
        run, rows, claim = store.read_and_claim(
            dag.dag_id,
            run_id,
            spec.task_id,
            index,
            keys[0],
            keys[1:],
            also=also or (),
            element=item,
            worker=task.request.hostname,
            celery_task_id=task.request.id,
        )
    else:
        wanted = keys if keys is None or also is None else sorted({*keys, *also})
        run, rows = store.read_for_task(
            dag.dag_id, run_id, spec.task_id, index, spec.upstream, keys=wanted, element=item
        )
    if closing is not None and whole is not None:
        closing.rows = rows
    return run, rows, claim, item is not None


def _map_item(dag: DAG, spec: TaskSpec, run_id: str, index: int) -> tuple[str, int] | None:
    """For a .map() instance, the (source row's key, index) of its own item, read instead of
    the whole list (O(1) bytes per instance, not O(width): a 10,000-wide map would move 10^4
    lists of 10^4 items). None, and the whole list is read, when the source row's key is not
    the default one, the source is itself mapped, or another argument takes the whole list."""
    if spec.map_over is None or index < 0 or spec.map_over in spec.argument_upstream:
        return None
    source = dag.tasks.get(spec.map_over)
    if source is None or source.map_over or source.dedupe_key is not None:
        return None
    return default_dedupe_key(dag.dag_id, run_id, spec.map_over), index


def _reads_item(dag: DAG, spec: TaskSpec, run_id: str, index: int) -> bool:
    """Whether this .map() task's instances read only their own item (``_read``), so that its
    expansion records the items for them (``store.record_map_items``)."""
    keys = _row_keys(dag, spec, run_id, index)
    return keys is not None and _map_item(dag, spec, run_id, index) is not None


def _whole_run_keys(dag: DAG, run_id: str) -> list[str] | None:
    """Every task run's dedupe key of a run of ``dag``, when they are knowable before reading
    (default keys, no .map()) and few enough to bind; None otherwise."""
    specs = dag.tasks.values()
    if len(dag.tasks) > MAX_WHOLE_RUN_KEYS or any(s.map_over or s.dedupe_key for s in specs):
        return None
    return [default_dedupe_key(dag.dag_id, run_id, task_id) for task_id in dag.tasks]


def _run(
    runtime: Runtime,
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    index: int,
    closing: Closing | None = None,
) -> dict[str, Any] | None:
    store = runtime.store
    run, rows, claim, item_only = _read(store, task, dag, spec, run_id, index, closing)
    if run is None:
        log.error("no DAG run %s/%s in the results database; message dropped", dag.dag_id, run_id)
        return None
    key = dedupe_key_for(spec, dag, run, index)
    own_key = default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)
    own = next((t for t in rows if t.dedupe_key in (key, own_key)), None)
    situation = Situation(
        trigger_rule=spec.trigger_rule,
        upstream=spec.upstream,
        mapped=_mapped_upstream(dag, spec),
        rows=rows,
        own=own,
        waits=task.request.retries or 0,
        retries=spec.retry.retries,
        expands=bool(spec.map_over) and index < 0,
    )
    decision = decide(situation)
    if decision.action is Action.DONE and own is not None:
        return _done(runtime, task, dag, spec, run_id, key, own)
    if run.state in DAG_RUN_FINAL:
        # Cancelled (or marked, or timed out): no task of it starts any more, whatever its rule
        # (a duplicate of a task that finished is still reported as one, just above).
        log.info("DAG run %s/%s is %s: task %s not started", dag.dag_id, run_id, run.state,
                 spec.task_id)  # fmt: skip
        return None
    if decision.action is Action.WAIT:
        log.info("task %s waits: %s", spec.task_id, decision.reason)
        retry_later(task, UPSTREAM_WAIT_SECONDS)
    if (state := decision.recorded_state) is not None:
        # a decision about this run, under this run's own key (a custom key may be shared)
        store.set_task_state(
            own_key,
            dag_id=dag.dag_id,
            run_id=run_id,
            task_id=spec.task_id,
            map_index=index,
            state=state,
            error=decision.reason if state == TaskRunState.UPSTREAM_FAILED else None,
        )
        log.info("task %s %s by %s", spec.task_id, state, decision.reason)
        return events.outcome(state)
    if claim is None:
        claim = store.claim_task_run(
            key,
            dag_id=dag.dag_id,
            run_id=run_id,
            task_id=spec.task_id,
            map_index=index,
            worker=task.request.hostname,
            celery_task_id=task.request.id,
        )
    seen = ClaimSeen(
        outcome=claim.outcome,
        try_number=claim.record.try_number,
        taken_over=own is not None and own.state == TaskRunState.RUNNING,
    )
    decision = decide(dataclasses.replace(situation, claim=seen))
    if decision.action is Action.DONE:
        record = claim.record
        if record.run_id != run_id:
            # a dedupe key shared across runs: another run did the side effect; this run's
            # task run is final with its stored result and a pointer to that run
            record = store.record_deduped(own_key, run_id=run_id, source=record)
            log.info(
                "task run %s was done by run %s; not running it again", key, record.deduped_from
            )
        return _done(runtime, task, dag, spec, run_id, key, record)
    if decision.action is Action.HELD:
        wait = _lease_remaining(claim.record, runtime.settings.lease_seconds)
        log.info("task run %s is held by %s; retrying in %.1fs", key, claim.record.worker, wait)
        retry_later(task, wait)
    assert claim.token is not None
    attempt = Attempt(
        runtime, task, dag, spec, run, key, claim.token, index, claim.record.try_number,
        record=claim.record, closing=closing, item_only=item_only,
    )  # fmt: skip
    if decision.action is Action.FAIL_WORKER_LOST:
        attempt.fail(decision.reason, None, tries=attempt.try_number - 1)
        return None
    if decision.action is Action.EXPAND:
        _expand(attempt)
        return None
    return _ran(closing, claim.record, _execute(attempt, rows))


def _ran(
    closing: Closing | None, record: TaskRunRecord, result: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Note a closing task's own final row (its claim's, in the state it ended in)."""
    if closing is not None and result is not None:
        closing.own = dataclasses.replace(record, state=result[events.OUTCOME_KEY])
    return result


def _done(
    runtime: Runtime,
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    key: str,
    record: TaskRunRecord,
) -> dict[str, Any]:
    log.info("task run %s already %s; not running it again", key, record.state)
    count = record.map_count or 0
    if spec.map_over and record.map_index < 0 and record.state == TaskRunState.SUCCESS and count:
        # a redelivered expander (a resume, a clear) recounts its fan-in and sends the instances
        # again (each is deduped), or continues its canvas when they have all ended
        fan_out(runtime, task, dag, spec, run_id, count)
    return events.outcome(record.state, duplicate=True)


def _lease_remaining(record: TaskRunRecord, lease_seconds: float) -> float:
    from datetime import UTC, datetime

    if record.lease_expires_at is None:
        return lease_seconds
    left = (record.lease_expires_at - datetime.now(UTC)).total_seconds()
    return max(0.5, min(lease_seconds, left + 0.2))


def upstream_results(dag: DAG, rows: Iterable[TaskRunRecord]) -> dict[str, Any]:
    """Each upstream task's result: its row's, or for a .map() task the list of its instances'
    results in map order (only ``map_count`` of them: the expansion is recorded out of band)."""
    own: dict[str, TaskRunRecord] = {}
    instances: dict[str, dict[int, Any]] = {}
    for t in rows:
        if t.map_index < 0:
            own[t.task_id] = t
        else:
            instances.setdefault(t.task_id, {})[t.map_index] = t.result
    results: dict[str, Any] = {}
    for task_id, row in own.items():
        up = dag.tasks.get(task_id)
        if up is not None and up.map_over and row.state == TaskRunState.SUCCESS:
            got = instances.get(task_id, {})
            results[task_id] = [got[i] for i in range(row.map_count or 0) if i in got]
        else:
            results[task_id] = row.result
    return results


class NoSuchItemError(Exception):
    """A mapped instance's index is past the end of the list its task maps over."""


def _inputs(
    dag: DAG, spec: TaskSpec, index: int, rows: list[TaskRunRecord], *, item_only: bool = False
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a task run from its upstream rows. ``item_only``: a mapped instance's
    read gave its own item as its source's result (``_map_item``), and the expander's row."""
    results = upstream_results(dag, (t for t in rows if t.task_id != spec.task_id))

    def resolve(value: Any) -> Any:
        return map_leaves(value, lambda v: results.get(v.task_id) if isinstance(v, Ref) else v)

    args = tuple(resolve(a) for a in spec.args)
    kwargs = {k: resolve(v) for k, v in spec.kwargs.items()}
    if spec.map_over:
        if item_only:
            expander = next(
                (t for t in rows if t.task_id == spec.task_id and t.map_index < 0), None
            )
            count = None if expander is None else expander.map_count
            if count is None or index >= count:
                raise NoSuchItemError(_no_item(spec, index, count))
            return (results.get(spec.map_over), *args), kwargs
        items = results.get(spec.map_over) or []
        if index >= len(items):
            raise NoSuchItemError(_no_item(spec, index, len(items)))
        args = (items[index], *args)
    return args, kwargs


def _no_item(spec: TaskSpec, index: int, count: int | None) -> str:
    of = "an unexpanded list" if count is None else f"the {count} items"
    return f'map index {index} is past the end of {of} of "{spec.map_over}"'


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
    record: TaskRunRecord | None = None  # the claimed row
    closing: Closing | None = None  # this is the run's closing task
    item_only: bool = False  # a mapped instance's rows hold only its own item (_map_item)

    def finish(self, state: str, **outcome: Any) -> None:
        """Record the outcome under this attempt's lease. If the lease was taken over (another
        worker runs the task now), stop: write nothing more, continue no canvas (Ignore).
        A closing task whose success makes the run final (every other task run of it is known
        and final) ends the run in the same statement (``closing.closed``)."""
        budget = self.runtime.settings.result_write_retry_seconds
        self.runtime.leases.writing(self.key)  # a lost lease is reported below, not twice
        run_state = self._closes_as(state)
        if run_state is not None and self.closing is not None:
            done = write_outcome_closing(
                self.runtime.store, self.key, self.token, budget, outcome.get("result"),
                self.dag, self.run.run_id, run_state,
            )  # fmt: skip
            written = done.written
            self.closing.closed, self.closing.started = done.closed, done.started
        else:
            ended = write_outcome(
                self.runtime.store, self.key, self.token, budget, state, outcome,
                instance=self.index >= 0,
            )  # fmt: skip
            written = ended.written
            if ended.fan_in is not None:
                continue_fan_in(self.task.app, ended.fan_in, f"task run {self.key}")
        if not written:
            self.runtime.leases.release(self.key)
            log.warning(
                "task run %s: this worker's lease was taken over; stopping without recording "
                "%s or continuing the canvas (the new holder does both)",
                self.key,
                state,
            )
            raise Ignore()

    def _closes_as(self, state: str) -> str | None:
        """The run's final state if this attempt's ``state`` ends the run, known without a read:
        a closing task's success, the rest of the run read with its own rows and all final."""
        if state != TaskRunState.SUCCESS or self.closing is None or self.record is None:
            return None
        tasks = self.closing.tasks_with(dataclasses.replace(self.record, state=state))
        if tasks is None:
            return None
        expected = {task_id: spec.map_over is not None for task_id, spec in self.dag.tasks.items()}
        outcome = decide_run_outcome(expected, tasks)
        return None if outcome is None else str(outcome)

    def fail(
        self,
        error: str,
        tb: str | None,
        *,
        tries: int | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Record the final failure and its dead letter (one transaction), then hand it to
        Celery (the canvas goes on and ``exc`` is raised so Celery records FAILURE): see
        ``record_final_failure``."""
        tries = self.try_number if tries is None else tries
        letter = DeadLetterDraft(
            args={"run_id": self.run.run_id, "map_index": self.index},
            conf=dict(self.run.conf),
            tries=tries,
        )
        self.finish("failed", error=error, traceback=tb, letter=letter)
        log.error(
            "task run %s failed after %d tries: %s; dead letter recorded", self.key, tries, error
        )
        events.task_run_finished(self.dag.dag_id, self.spec.task_id, "failed")
        self.callback(self.spec.on_failure, error)
        record_final_failure(self.task, exc or TaskRunFailedError(error))

    def callback(self, fn: Any, error: str) -> None:
        if fn is None:
            return
        try:
            with canvas.sending_canvas(False):  # user code
                fn(
                    dag_id=self.dag.dag_id,
                    run_id=self.run.run_id,
                    task_id=self.spec.task_id,
                    error=error,
                )
        except Exception:  # a user's callback must not change the outcome
            log.exception("callback %r raised", fn)


def write_outcome(
    store: Store,
    key: str,
    token: str,
    budget: float,
    state: str,
    outcome: dict[str, Any],
    *,
    instance: bool = False,
) -> TaskRunEnded:
    """Write a claimed task run's outcome; while the database is unreachable retry in process
    (waits of at most a second, with jitter) for up to ``budget`` seconds, so a task that ran
    is not run again for a blip. Then StoreUnavailableError goes to Celery's retry. Falsy when
    the lease was taken over (nothing written). ``instance``: a .map() instance, counted in
    its expansion's fan-in (``store.finish_map_instance``)."""
    retrying = _write_retries(key, budget)
    if instance:
        ended: TaskRunEnded = retrying(
            store.finish_map_instance, key, token, state=state, **outcome
        )
        return ended
    written: bool = retrying(store.finish_task_run, key, token, state=state, **outcome)
    return TaskRunEnded(written)


def _write_retries(key: str, budget: float) -> tenacity.Retrying:
    """In-process retries of an outcome write while the database is unreachable (waits of at
    most a second, with jitter) for up to ``budget`` seconds."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(StoreUnavailableError),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=MAX_SLEEP_SECONDS),
        stop=tenacity.stop_after_delay(budget),
        before_sleep=lambda rs: log.warning(
            "results database unavailable while recording %s (write try %d: %s); retrying",
            key,
            rs.attempt_number,
            rs.outcome.exception() if rs.outcome else "no outcome",
        ),
        reraise=True,
    )


def write_outcome_closing(
    store: Store,
    key: str,
    token: str,
    budget: float,
    result: Any,
    dag: DAG,
    run_id: str,
    run_state: str,
) -> FinishedRun:
    """``write_outcome`` of a success that also ends the DAG run in ``run_state`` and starts
    the DAG's waiting runs, in one round trip (``store.finish_and_close``), with the same
    in-process retries."""
    retrying = _write_retries(key, budget)
    done: FinishedRun = retrying(
        store.finish_and_close,
        key,
        token,
        result=result,
        dag_id=dag.dag_id,
        run_id=run_id,
        run_state=run_state,
        max_active_runs=dag.max_active_runs,
    )
    return done


def _execute(attempt: Attempt, rows: list[TaskRunRecord]) -> dict[str, Any] | None:
    a = attempt
    dag, spec, run = a.dag, a.spec, a.run
    try:
        args, kwargs = _inputs(dag, spec, a.index, rows, item_only=a.item_only)
    except NoSuchItemError as exc:  # a message no expansion sent: fail it, run nothing
        a.fail(str(exc), None)
        return None
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
            log.debug(
                "task run %s started (try %d of %d)", a.key, a.try_number, spec.retry.retries + 1
            )
            try:
                with canvas.sending_canvas(False):  # the user's own publishes are plain Celery
                    result = spec.fn(*args, **kwargs)
            except Retry:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: anything may go wrong
                _handle_failure(a, exc)
                return None
            try:
                a.finish("success", result=result)
            except ResultError as exc:
                a.fail(str(exc), traceback.format_exc(), exc=exc)
                return None
            log.debug("task run %s succeeded in %.3fs", a.key, time.perf_counter() - started)
            # its success is recorded: the next step of its chain goes with its event in one
            # round trip (a run's closing task has none; a fan-out's are sent by Celery)
            canvas.send_chain_step(a.task)
            return events.outcome(TaskRunState.SUCCESS)
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
        retry_later(attempt.task, delay, exc)
    attempt.fail(error, tb, exc=exc)


def _expand(attempt: Attempt) -> None:
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
    if _reads_item(a.dag, a.spec, a.run.run_id, 0):  # written before any instance is sent
        a.runtime.store.record_map_items(a.dag.dag_id, a.run.run_id, a.spec.task_id, values)
    a.finish("success", result=None, map_count=len(values))
    fan_out(a.runtime, a.task, a.dag, a.spec, a.run.run_id, len(values))


def fan_out(
    runtime: Runtime, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, count: int
) -> None:
    """Send a .map() task's ``count`` instances as a plain group (no chord): the canvas that
    follows the expander is stored with its fan-in first (``store.open_fan_in``), and the
    worker whose instance ends last sends it (``continue_fan_in``). When every instance has
    ended already (a redelivered expander), the expander's own canvas goes on instead."""
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


def continue_fan_in(app: Celery, fan_in: dict[str, Any], what: str) -> None:
    """``what`` (a .map() instance) was the last of its expansion to end: send what follows
    the expander. If that cannot be sent now, the run goes silent and the reconciler resumes
    it: the redelivered expander finds every instance ended and continues (``fan_out``)."""
    try:
        canvas.continue_captured(app, fan_in)
    except Exception:
        log.exception(
            "%s was the last of its .map() to end but could not send what follows it; the "
            "reconciler resumes the run",
            what,
        )
