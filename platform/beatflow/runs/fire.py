"""The Celery tasks beat fires become on a worker: ``beatflow.fire_schedules`` (what the beat
sends: a batch of ``[dag_id, logical_date, trigger]`` and the leader epoch) and
``beatflow.fire_schedule`` (one tick) turn ticks into DAG runs whose ids derive from the tick,
so any number of fires of one tick make one run."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from celery import Celery
from celery import Task as CeleryTask

from beatflow.errors import DagNotFoundError, StoreUnavailableError
from beatflow.execution.options import TASK_OPTIONS, store_retry_delay

log = logging.getLogger(__name__)

FIRE_TASK = "beatflow.fire_schedule"
FIRE_BATCH_TASK = "beatflow.fire_schedules"
FIRE_TRIGGERS = frozenset({"scheduled", "catchup"})


def register(app: Celery) -> None:
    """Register beatflow's scheduler tasks on ``app``."""

    @app.task(name=FIRE_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def fire_schedule(
        self: CeleryTask,
        dag_id: str,
        logical_date: str,
        leader_epoch: int,
        trigger: str = "scheduled",
    ) -> str | None:
        try:
            return fire(self.app, dag_id, logical_date, leader_epoch, trigger)
        except StoreUnavailableError as exc:
            raise self.retry(countdown=store_retry_delay(self.request.retries), exc=exc) from exc

    @app.task(name=FIRE_BATCH_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def fire_schedules(self: CeleryTask, fires: list[list[str]], leader_epoch: int) -> int:
        created = 0
        try:
            for dag_id, logical_date, trigger in fires:
                created += fire(self.app, dag_id, logical_date, leader_epoch, trigger) is not None
        except StoreUnavailableError as exc:  # the whole batch again: each fire is idempotent
            raise self.retry(countdown=store_retry_delay(self.request.retries), exc=exc) from exc
        return created


def fire(
    app: Celery, dag_id: str, logical_date: str, leader_epoch: int, trigger: str = "scheduled"
) -> str | None:
    """Create (or find) the DAG run of one tick; None when the DAG is paused or unknown here."""
    from beatflow.runtime import runtime_of
    from beatflow.runs import make_run_id, trigger_dag

    runtime = runtime_of(app)
    tick = datetime.fromisoformat(logical_date)
    tick = tick if tick.tzinfo else tick.replace(tzinfo=UTC)
    if trigger not in FIRE_TRIGGERS:
        trigger = "scheduled"
    if runtime.store.is_paused(dag_id):
        log.info(
            "DAG %s is paused: tick %s not run", dag_id, logical_date, extra={"dag_id": dag_id}
        )
        return None
    try:
        record = trigger_dag(
            app,
            dag_id,
            run_id=make_run_id("scheduled", tick),
            logical_date=tick,
            trigger=trigger,
            leader_epoch=leader_epoch,
        )
    except DagNotFoundError:
        log.error(
            "DAG %s is scheduled but not loaded on this worker (tick %s dropped); "
            "restart the workers after adding DAGs",
            dag_id,
            logical_date,
            extra={"dag_id": dag_id},
        )
        return None
    return record.run_id
