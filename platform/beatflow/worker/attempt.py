"""One claimed try of a task run: run the user's function under the lease, record its outcome
(with in-process retries while the database blips), retry it through Celery or fail it for good
with its dead letter. A worker whose lease was taken over stops: it writes nothing more and
continues nothing."""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tenacity
from celery import Task as CeleryTask
from celery.exceptions import Ignore, Retry

from beatflow.dag import flow
from beatflow.dag.authoring import reset_task_context, set_task_context
from beatflow.dag.flow import Skip
from beatflow.dag.model import DAG, TaskSpec
from beatflow.errors import NoSuchItemError, ResultError, StoreUnavailableError, TaskRunFailedError
from beatflow.execution import canvas, events
from beatflow.execution.backoff import countdown, retry_delay
from beatflow.execution.context import TaskContext, make_logger
from beatflow.execution.decide import run_outcome
from beatflow.execution.lease import ended_meanwhile
from beatflow.logs import correlation
from beatflow.notify import callbacks
from beatflow.states import TaskRunState
from beatflow.store import DeadLetterDraft, FinishedRun, TaskRunEnded
from beatflow.worker.inputs import inputs
from beatflow.worker.letters import continue_fan_in, record_final_failure
from beatflow.worker.outlets import record_outlets
from beatflow.worker.retry import MAX_SLEEP_SECONDS, retry_later

if TYPE_CHECKING:
    from beatflow.runtime import Runtime
    from beatflow.store import DagRunRecord, Store, TaskRunRecord
    from beatflow.worker.closing import Closing

log = logging.getLogger(__name__)


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
    item_only: bool = False  # a mapped instance's rows hold only its own item (claim.map_item)

    @property
    def round_try(self) -> int:
        """This try's number in the current round: the retry policy counts from 1 again after
        a clear or a replay (``tries_before``), while ``try_number`` keeps growing."""
        before = self.record.tries_before if self.record is not None else 0
        return max(1, self.try_number - before)

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
            why = self._ended_meanwhile()
            if why is not None:
                log.warning(
                    "task run %s: %s; stopping without recording %s or continuing the canvas",
                    self.key,
                    why,
                    state,
                )
            else:
                log.warning(
                    "task run %s: this worker's lease was taken over; stopping without recording "
                    "%s or continuing the canvas (the new holder does both)",
                    self.key,
                    state,
                )
            raise Ignore()

    def _ended_meanwhile(self) -> str | None:
        """Why this attempt could not record its outcome when its task run ended without it
        (its run cancelled or marked); None for a takeover (or when that cannot be read)."""
        try:
            return ended_meanwhile(self.runtime.store.get_task_run(self.key))
        except Exception:  # noqa: BLE001 - only the wording of a warning depends on it
            return None

    def _closes_as(self, state: str) -> str | None:
        """The run's final state if this attempt's ``state`` ends the run, known without a read:
        a closing task's success, the rest of the run read with its own rows and all final."""
        if state != TaskRunState.SUCCESS or self.closing is None or self.record is None:
            return None
        tasks = self.closing.tasks_with(dataclasses.replace(self.record, state=state))
        if tasks is None:
            return None
        expected = {task_id: spec.map_over is not None for task_id, spec in self.dag.tasks.items()}
        quiet = [t for t, spec in self.dag.tasks.items() if not spec.fails_run]
        outcome = run_outcome(expected, tasks, quiet)
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
        ``letters.record_final_failure``."""
        tries = self.round_try if tries is None else tries
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
        self.notify(TaskRunState.FAILED, error)
        record_final_failure(self.task, exc or TaskRunFailedError(error))

    def notify(self, state: str, error: str | None = None, reason: str | None = None) -> None:
        """The task run's ``on_*_callback``s for ``state`` (success, failed, up_for_retry,
        skipped), once it is committed (``finish`` returned): plain callables in process,
        notifiers through the outbox; never raises. The context's try number is the row's (the
        reconciler makes the same event key from it: ``notify.sweep``)."""
        callbacks.task_event(
            self.runtime, self.dag, self.spec, self.run, state=state, map_index=self.index,
            try_number=self.try_number, error=error, reason=reason, dedupe_key=self.key,
        )  # fmt: skip


# a sensor's pokes in place of the function's one call (worker/sensor.py): the done value
Poke = Callable[["Attempt", tuple[Any, ...], dict[str, Any]], Any]


def execute(
    attempt: Attempt, rows: list[TaskRunRecord], poke: Poke | None = None
) -> dict[str, Any] | None:
    """Run the task's function under the lease and record what came of it; the outcome for
    Celery's task-succeeded event, or None when it failed (recorded, retried or failed).
    ``poke``: a sensor's, which calls the function until it is done (or reschedules: Retry)."""
    a = attempt
    dag, spec, run = a.dag, a.spec, a.run
    try:
        args, kwargs = inputs(dag, spec, a.index, rows, item_only=a.item_only)
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
    ctx_token = set_task_context(ctx)
    try:
        with correlation(try_number=a.try_number, dedupe_key=a.key):
            log.debug(
                "task run %s started (try %d, %d of %d)",
                a.key,
                a.try_number,
                a.round_try,
                spec.retry.retries + 1,
            )
            try:
                if poke is not None:
                    result = poke(a, args, kwargs)
                else:
                    with canvas.sending_canvas(False):  # the user's own publishes: plain Celery
                        result = spec.fn(*args, **kwargs)
                if spec.control is not None:  # a branch's followed ids, checked (dag/flow.py)
                    result = flow.outcome(dag, spec, result)
            except (Retry, Ignore):  # retried (a reschedule), or a lease lost or poke taken
                raise
            except Skip as exc:  # the task ends itself skipped
                return skip(a, exc.reason or "skipped by the task")
            except Exception as exc:  # noqa: BLE001 - user code: anything may go wrong
                handle_failure(a, exc)
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
            a.notify(TaskRunState.SUCCESS)  # after the next step is on its way
            record_outlets(a)  # its assets' events (the beat records them too, once)
            return events.outcome(TaskRunState.SUCCESS)
    finally:
        reset_task_context(ctx_token)
        a.runtime.leases.release(a.key)


def skip(attempt: Attempt, reason: str) -> dict[str, Any]:
    """The function raised ``beatflow.Skip``: record the task run skipped with its reason (no
    retry, no dead letter); its downstream decide by their trigger rules."""
    attempt.finish(TaskRunState.SKIPPED, error=reason)
    log.info("task run %s skipped: %s", attempt.key, reason)
    canvas.send_chain_step(attempt.task)
    attempt.notify(TaskRunState.SKIPPED, reason=reason)  # its on_skipped_callback, once durable
    return events.outcome(TaskRunState.SKIPPED)


def handle_failure(attempt: Attempt, exc: Exception) -> None:
    """The function raised: record up_for_retry and retry through Celery while tries are
    left in this round (a clear or a replay starts a new one), else fail the task run for
    good."""
    error = f"{type(exc).__name__}: {exc}"
    tb = traceback.format_exc()
    spec = attempt.spec
    # an exception marked ``final`` (a sensor's timeout) takes no retry
    if attempt.round_try <= spec.retry.retries and not getattr(exc, "final", False):
        # the jitter is the task run's own: every message for the retry finds the same due
        # time in its row (execution/backoff.py, worker/node.py)
        delay = retry_delay(spec.retry, attempt.key, attempt.round_try, attempt.try_number)
        attempt.finish("up_for_retry", error=error, traceback=tb)
        log.warning(
            "task run %s failed on try %d (%s); retrying in %.2fs",
            attempt.key,
            attempt.try_number,
            error,
            delay,
        )
        events.task_run_finished(attempt.dag.dag_id, spec.task_id, "up_for_retry")
        attempt.notify(TaskRunState.UP_FOR_RETRY, error)
        settings = attempt.runtime.settings
        # a longer wait is several messages: one that arrives early waits again (worker/node)
        wait = countdown(delay, settings.visibility_timeout, settings.max_countdown_seconds)
        retry_later(attempt.task, wait, exc)
    attempt.fail(error, tb, exc=exc)


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
