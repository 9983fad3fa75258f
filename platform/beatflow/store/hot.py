"""The node wrapper's hot path in as few statements as it can take: one SELECT reads the DAG
run and exactly the task-run rows a task needs (its upstream's and its own), so a task run costs
one read, its claim and its finish. A mapped instance reads its own row and its upstream's,
never its siblings' (a 10,000-wide map would read 10^8 rows).

In the common case the read and the claim are one statement (``read_and_claim``): when the rows
read make the claim certain (the run is active, every upstream row succeeded, the task has no
row yet), the same statement inserts the claim, so such a task run costs two statements in all:
this one and its finish.

A run's closing task that knows every task run of its run (and so the run's final state) writes
its own success and the run's end in one statement too (``finish_and_close``)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from beatflow.errors import StoreError
from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.node_sql import (
    MAX_BOUND_UPSTREAM,
    element_params,
    is_own,
    node_read,
    with_item,
)
from beatflow.store.records import (
    DAG_RUN_FINISHED_STATES,
    Claim,
    DagRunRecord,
    FinishedRun,
    TaskRunRecord,
)
from beatflow.store.rows import dag_run_record, task_run_record

__all__ = ["MAX_BOUND_UPSTREAM", "HotPathMixin"]


class HotPathMixin(StoreBase):
    def finish_and_close(
        self,
        dedupe_key: str,
        token: str,
        *,
        result: Any,
        dag_id: str,
        run_id: str,
        run_state: str,
        max_active_runs: int,
    ) -> FinishedRun:
        """``finish_task_run(state='success')``; when it wrote, the DAG run's end in
        ``run_state`` (from queued or running); when that ended the run, the start of the DAG's
        oldest queued runs that now fit under ``max_active_runs``. One transaction, taken under
        the DAG's dispatch lock from its start (one round trip on PostgreSQL, migration 0010),
        so no queued run is missed (see the migration). The caller must know the run's final
        state: every other task run of it is final."""
        if run_state not in DAG_RUN_FINISHED_STATES:
            raise StoreError(f"cannot close DAG run {dag_id}/{run_id} as {run_state!r}")
        self.check_result(dedupe_key, result)
        action = f"finishing task run {dedupe_key!r} and closing DAG run {dag_id}/{run_id}"
        params = {
            "p_key": dedupe_key,
            "p_token": token,
            "p_result": result,
            "p_ended_at": utcnow(),
            "p_dag_id": dag_id,
            "p_run_id": run_id,
            "p_run_state": run_state,
        }
        return self._backend.finish_and_close(self._db, action, params, max_active_runs)

    def read_and_claim(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        dedupe_key: str,
        upstream_keys: Sequence[str],
        *,
        also: Sequence[str] = (),
        element: tuple[str, int] | None = None,
        worker: str | None = None,
        celery_task_id: str | None = None,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord], Claim | None]:
        """``read_for_task`` by keys (``dedupe_key``, the task's own, and ``upstream_keys``),
        and in the same statement the claim of ``dedupe_key`` when the rows make it certain:
        the run is active, every upstream row is there and succeeded, and the task has no row
        yet. The claim is then ``run`` at try 1, exactly what ``claim_task_run`` would have
        given; otherwise it is None and nothing was written (decide and claim as usual). For a
        task whose trigger rule runs when all its upstream succeeded, with default keys.
        ``also``: more rows of the run to read (their states do not count for the claim).
        ``element`` (key, i): that row comes back with only the i-th item of its result as its
        result (None past the end), what a .map() instance reads of the list it maps over."""
        ready_keys = sorted(set(upstream_keys) - {dedupe_key})
        keys = sorted({dedupe_key, *upstream_keys, *also})
        now = utcnow()
        token = uuid.uuid4().hex
        params: dict[str, Any] = {
            "p_dag_id": dag_id,
            "p_run_id": run_id,
            "p_keys": keys,
            "p_dedupe_key": dedupe_key,
            "p_task_id": task_id,
            "p_map_index": map_index,
            "p_worker": worker,
            "p_celery_task_id": celery_task_id,
            "p_lease_token": token,
            "p_started_at": now,
            "p_ready_keys": ready_keys,
            "p_ready": len(ready_keys),
            "p_lease_seconds": self.lease_seconds,
            **element_params(element, task_id, map_index),
        }
        action = f"reading and claiming task {task_id!r} of DAG run {dag_id}/{run_id}"
        rows = self._backend.read_and_claim(self._db, action, params, now, self.lease_seconds)
        if not rows:
            return None, [], None
        run = dag_run_record(rows[0], "r_")
        tasks, claim = [], None
        for row in rows:
            if not row["t_dedupe_key"]:
                continue
            record = task_run_record(row, "t_")
            if row["t_claimed"]:
                claim = Claim("run", record, token)
            elif record.dag_id == dag_id and record.run_id == run_id:
                tasks.append(record)
        return run, tasks, claim

    def read_for_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        upstream: Collection[str],
        *,
        keys: Collection[str] | None = None,
        element: tuple[str, int] | None = None,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord]]:
        """The DAG run (None if there is none) and the task-run rows of ``upstream`` plus the
        task's own row (``task_id``/``map_index``; under any dedupe key), in one statement.
        When the caller knows every such row's dedupe key (``keys``: default keys, no mapped
        upstream) the rows are found through the unique key index: the database fetches those
        rows only, not every row of the run. ``element``: as for ``read_and_claim``."""
        filtered = len(upstream) <= MAX_BOUND_UPSTREAM
        by_key = keys is not None and len(keys) <= MAX_BOUND_UPSTREAM
        params: dict[str, Any] = {"p_dag_id": dag_id, "p_run_id": run_id}
        projecting = element_params(element, task_id, map_index)
        if by_key:
            assert keys is not None
            params["p_keys"] = sorted(keys)
            params |= projecting
        elif filtered:
            params |= {"p_upstream": sorted(upstream), "p_task_id": task_id, "p_index": map_index}
        projected = by_key and element is not None
        with self._read(f"reading task {task_id!r} of DAG run {dag_id}/{run_id}") as conn:
            statement = node_read(filtered, by_key, projected)
            rows = conn.execute(statement, params).mappings().all()
        if not rows:
            return None, []
        run = dag_run_record(rows[0], "r_")
        tasks = [task_run_record(row, "t_") for row in rows if row["t_dedupe_key"]]
        if by_key:
            tasks = [t for t in tasks if t.dag_id == dag_id and t.run_id == run_id]
        elif not filtered:
            tasks = [t for t in tasks if t.task_id in upstream or is_own(t, task_id, map_index)]
        if element is not None and not projected:  # read whole: the same answer, taken here
            tasks = [with_item(t, *element) for t in tasks]
        return run, tasks
