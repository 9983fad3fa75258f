"""Reading and claiming: the one statement that reads a task's DAG run and the rows it needs (and
claims its dedupe key when the rows make the claim certain), the claim itself when it could not
be made then, and the records of what the decision settles without running the task."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from celery import Task as CeleryTask

from beatflow.dag import flow
from beatflow.dag.model import DAG, TaskSpec
from beatflow.execution import rules
from beatflow.execution.decide import ClaimSeen, Decision, Situation
from beatflow.execution.dedupe import default_dedupe_key
from beatflow.states import TaskRunState

if TYPE_CHECKING:
    from beatflow.store import Claim, DagRunRecord, Store, TaskRunRecord
    from beatflow.worker.closing import Closing

log = logging.getLogger(__name__)

# A closing task reads every task run of its run with its own when the run has at most this
# many (then closing the run needs no read of its own).
MAX_WHOLE_RUN_KEYS = 200


class Read(NamedTuple):
    """What the first statement found: the DAG run (None: no such run), the rows the task
    needs, the claim when the statement made it, and whether a mapped instance's read gave
    only its own item of its source's list."""

    run: DagRunRecord | None
    rows: list[TaskRunRecord]
    claim: Claim | None
    item_only: bool


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


def read(
    store: Store,
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    index: int,
    closing: Closing | None,
) -> Read:
    """The DAG run, the rows this task needs, and the claim when the read could make it."""
    # One statement reads the run and the rows this task needs: its upstream's and its own (a
    # mapped instance never reads its siblings; a 10,000-wide fan-in reads its run once). When
    # the rows make the claim certain, the same statement claims (see claims_when_ready). A
    # closing task reads every task run of a small run with them, to close it without a read.
    # A mapped instance reads only its own item of the list it maps over, and its expander's
    # row for the number of items (see map_item).
    # A task below a branch or short-circuit also reads that task's row (its decision), and
    # never claims in the read: an upstream success does not make its claim certain.
    gated = {g.task_id for g in flow.gates(dag, spec.task_id)}
    keys = row_keys(dag, spec, run_id, index, gated)
    whole = whole_run_keys(dag, run_id) if closing is not None and keys is not None else None
    item = map_item(dag, spec, run_id, index) if keys is not None else None
    also = whole or ([default_dedupe_key(dag.dag_id, run_id, spec.task_id)] if item else None)
    claim = None
    # a pooled task claims with its pool's slots (worker/pools.py), never in the read
    pooled = spec.pool is not None
    ready = not gated and not pooled and claims_when_ready(spec.trigger_rule, len(spec.upstream))
    if keys is not None and ready:
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
            dag.dag_id, run_id, spec.task_id, index, spec.upstream | gated, keys=wanted,
            element=item,
        )  # fmt: skip
    if closing is not None and whole is not None:
        closing.rows = rows
    return Read(run, rows, claim, item is not None)


def situation(
    task: CeleryTask,
    dag: DAG,
    spec: TaskSpec,
    index: int,
    rows: list[TaskRunRecord],
    own: TaskRunRecord | None,
) -> Situation:
    """What the pure decision looks at, before the claim."""
    return Situation(
        trigger_rule=spec.trigger_rule,
        upstream=spec.upstream,
        mapped={u for u in spec.upstream if u in dag.tasks and dag.tasks[u].map_over},
        rows=rows,
        own=own,
        waits=task.request.retries or 0,
        retries=spec.retry.retries,
        expands=bool(spec.map_over) and index < 0,
        gates=flow.gates(dag, spec.task_id),
    )


def record_decided(
    store: Store,
    dag: DAG,
    spec: TaskSpec,
    run_id: str,
    index: int,
    decision: Decision,
    state: TaskRunState,
) -> bool:
    """Record what the trigger rule (or a branch or short-circuit above) decided (skipped,
    upstream_failed) without running, with why: a decision about this run, under this run's
    own key (a custom key may be shared). True only if this call wrote it."""
    wrote = store.set_task_state(
        default_dedupe_key(dag.dag_id, run_id, spec.task_id, index),
        dag_id=dag.dag_id,
        run_id=run_id,
        task_id=spec.task_id,
        map_index=index,
        state=state,
        error=decision.reason or None,  # why: shown as the reason of a skip
    )
    log.info("task %s %s by %s", spec.task_id, state, decision.reason)
    return wrote


def claim_key(
    store: Store, task: CeleryTask, dag: DAG, spec: TaskSpec, run_id: str, index: int, key: str
) -> Claim:
    """Claim ``key`` for this delivery (when the read could not claim it)."""
    return store.claim_task_run(
        key,
        dag_id=dag.dag_id,
        run_id=run_id,
        task_id=spec.task_id,
        map_index=index,
        worker=task.request.hostname,
        celery_task_id=task.request.id,
    )


def seen(claim: Claim, own: TaskRunRecord | None) -> ClaimSeen:
    """The claim's outcome as the decision needs it."""
    return ClaimSeen(
        outcome=claim.outcome,
        try_number=claim.record.try_number - claim.record.tries_before,
        taken_over=own is not None and own.state == TaskRunState.RUNNING,
    )


def done_record(
    store: Store, dag: DAG, spec: TaskSpec, run_id: str, index: int, claim: Claim, key: str
) -> TaskRunRecord:
    """The final row a claim found. A dedupe key shared across runs: another run did the side
    effect; this run's task run is recorded final with its stored result and a pointer to it."""
    record = claim.record
    if record.run_id == run_id:
        return record
    own_key = default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)
    record = store.record_deduped(own_key, run_id=run_id, source=record)
    log.info("task run %s was done by run %s; not running it again", key, record.deduped_from)
    return record


def lease_remaining(record: TaskRunRecord, lease_seconds: float) -> float:
    """How long to wait before a held task run's lease may have expired."""
    if record.lease_expires_at is None:
        return lease_seconds
    left = (record.lease_expires_at - datetime.now(UTC)).total_seconds()
    return max(0.5, min(lease_seconds, left + 0.2))


def row_keys(
    dag: DAG, spec: TaskSpec, run_id: str, index: int, gated: Collection[str] = ()
) -> list[str] | None:
    """The dedupe keys of the rows a task reads (its own, its upstream's, its ``gated``
    control tasks') when all are default keys (then they are found by the unique key index);
    None when a custom key or a mapped upstream (whose instances count) makes them unknowable
    before reading."""
    if spec.dedupe_key is not None:
        return None
    keys = [default_dedupe_key(dag.dag_id, run_id, spec.task_id, index)]
    for task_id in sorted(spec.upstream | set(gated)):
        up = dag.tasks.get(task_id)
        if up is None or up.map_over or up.dedupe_key is not None:
            return None
        keys.append(default_dedupe_key(dag.dag_id, run_id, task_id))
    return keys


@functools.cache
def claims_when_ready(trigger_rule: str, upstream: int) -> bool:
    """Whether the task claims once every upstream task succeeded (its trigger rule runs then):
    then the read may claim in the same statement when it finds exactly that (``read_and_claim``
    inserts only for an active run, all upstream rows succeeded and no row of its own, where
    ``decide`` says CLAIM and the claim's insert gives ``run`` at try 1)."""
    return rules.decide(trigger_rule, [TaskRunState.SUCCESS] * upstream) == "run"


def map_item(dag: DAG, spec: TaskSpec, run_id: str, index: int) -> tuple[str, int] | None:
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


def reads_item(dag: DAG, spec: TaskSpec, run_id: str, index: int) -> bool:
    """Whether this .map() task's instances read only their own item (``read``), so that its
    expansion records the items for them (``store.record_map_items``)."""
    keys = row_keys(dag, spec, run_id, index)
    return keys is not None and map_item(dag, spec, run_id, index) is not None


def whole_run_keys(dag: DAG, run_id: str) -> list[str] | None:
    """Every task run's dedupe key of a run of ``dag``, when they are knowable before reading
    (default keys, no .map()) and few enough to bind; None otherwise."""
    specs = dag.tasks.values()
    if len(dag.tasks) > MAX_WHOLE_RUN_KEYS or any(s.map_over or s.dedupe_key for s in specs):
        return None
    return [default_dedupe_key(dag.dag_id, run_id, task_id) for task_id in dag.tasks]
