"""``TriggerDagRunOperator`` on beatflow's own trigger (``runs.trigger_dag``): the run it starts
has an id derived from the triggering task run (or the ``trigger_run_id`` given), and the same
run id twice is one run, so a retried or redelivered trigger never starts a second run.

With ``wait_for_completion`` it is a sensor (``beatflow.dag.sensors``): each poke triggers (the
same run) and reads that run's state, done in ``allowed_states``, failed in ``failed_states``;
``poke`` mode by default, ``reschedule`` with ``deferrable=True``."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from beatflow.compat.airflow.dag import caller
from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.operators import BaseOperator
from beatflow.dag.sensors import PokeResult, sensor_spec
from beatflow.errors import DagDefinitionError
from beatflow.ids import MAX_ID_LENGTH


class TriggeredRunFailed(Exception):
    """The triggered run ended in one of ``failed_states``."""


class TriggerDagRunOperator(BaseOperator):
    """``TriggerDagRunOperator(trigger_dag_id=..., conf=..., logical_date=...,
    wait_for_completion=..., poke_interval=..., allowed_states=..., failed_states=...)``."""

    template_fields: Sequence[str] = ("trigger_dag_id", "trigger_run_id", "logical_date", "conf")

    def __init__(
        self,
        *,
        trigger_dag_id: str,
        trigger_run_id: str | None = None,
        conf: Mapping[str, Any] | None = None,
        logical_date: str | datetime | None = None,
        reset_dag_run: bool = False,
        wait_for_completion: bool = False,
        poke_interval: float = 60,
        allowed_states: Collection[str] | None = None,
        failed_states: Collection[str] | None = None,
        skip_when_already_exists: bool = False,
        fail_when_dag_is_paused: bool = False,
        deferrable: bool = False,
        note: str | None = None,
        openlineage_inject_parent_info: bool = True,
        **kwargs: Any,
    ) -> None:
        if skip_when_already_exists:
            raise unsupported(
                "TriggerDagRunOperator(skip_when_already_exists=True)",
                "a trigger's run exists once whatever the tries",
            )
        super().__init__(**kwargs)
        self.trigger_dag_id = trigger_dag_id
        self.trigger_run_id = trigger_run_id
        self.conf = dict(conf or {})
        self.logical_date = logical_date
        self.wait_for_completion = wait_for_completion
        self.allowed_states = [str(s) for s in (allowed_states or ["success"])]
        self.failed_states = [str(s) for s in (failed_states or ["failed"])]
        if wait_for_completion:
            try:
                self.spec.sensor = sensor_spec(
                    poke_interval=poke_interval,
                    mode="reschedule" if deferrable else "poke",
                    timeout=self.spec.time_limit or 7 * 24 * 3600.0,
                )
            except ValueError as exc:
                file, line = caller()
                raise DagDefinitionError(
                    f'task "{self.task_id}": {exc}', file=file, line=line
                ) from None

    def run_id_for(self, ti: Any) -> str:
        """The run id of the triggered run: given, or made from this task run's ids."""
        if self.trigger_run_id:
            return str(self.trigger_run_id)
        where = f"{ti.dag_id}.{ti.task_id}" + (f".{ti.map_index}" if ti.map_index >= 0 else "")
        run_id = f"triggered__{where}__{ti.run_id}"
        if len(run_id) > MAX_ID_LENGTH:
            run_id = f"triggered__{hashlib.sha256(run_id.encode()).hexdigest()[:40]}"
        return run_id

    def _when(self) -> datetime | None:
        value = self.logical_date
        if value is None or isinstance(value, datetime):
            return value
        return datetime.fromisoformat(str(value))

    def execute(self, context: Mapping[str, Any]) -> Any:
        from celery import current_task

        from beatflow.runs.trigger import trigger_dag
        from beatflow.runtime import runtime_of

        ti = context["ti"]
        run_id = self.run_id_for(ti)
        runtime = runtime_of(current_task.app)
        record = trigger_dag(
            runtime,
            str(self.trigger_dag_id),
            conf=self.conf,
            run_id=run_id,
            logical_date=self._when(),
        )
        ti.xcom_push(key="trigger_run_id", value=record.run_id)
        ti.xcom_push(key="trigger_dag_id", value=record.dag_id)
        if not self.wait_for_completion:
            return None
        state = str(record.state)
        if state in self.failed_states:
            raise TriggeredRunFailed(f"{self.trigger_dag_id} run {run_id} ended {state}")
        if state in self.allowed_states:
            return PokeResult(True, None)
        ti.log.info("run %s of %s is %s; waiting", run_id, self.trigger_dag_id, state)
        return PokeResult(False)
