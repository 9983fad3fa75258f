"""A sensor's pokes on the worker (``@task.sensor``, ``beatflow.dag.sensors``), in place of the
function's one call in ``attempt.execute``.

``poke`` mode pokes in the worker's slot until done, sleeping ``poke_interval`` between pokes.
``reschedule`` mode pokes once per claim. A poke that is not done ends the try
``up_for_reschedule`` and records the try's pokes (count, first poke, next poke) in the same
transaction, under the lease (``store.reschedule_task_run``); then the message goes back to the
broker with a countdown to the next poke (Celery's retry: the canvas after the sensor rides with
it) and the number of that poke. The claim of the next poke keeps the try number (a reschedule
consumes no retry).

Exactly once, whatever is lost or doubled: a message whose poke number was already made (a
redelivery past the visibility timeout, the reconciler's re-send racing the original) finds it
taken after its claim, puts the row back as it was and is dropped; a message that arrives
before its poke is due (an ETA capped below the visibility timeout, the reconciler's re-send of
a canvas whose sensor is waiting) puts the row back and waits again. A sensor whose next poke is
overdue and whose message is gone (a worker killed holding it, a broker restarted) is re-sent by
the reconciler (``runs/reconciler.py``), and that message makes the poke.

The timeout runs from the first poke (recorded): past it the task run fails without retries, or
with ``soft_fail`` ends skipped."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Ignore

from beatflow.dag.flow import Skip
from beatflow.dag.sensors import SensorSpec, poked
from beatflow.execution import canvas, events
from beatflow.execution.backoff import EARLY_TOLERANCE_SECONDS, countdown
from beatflow.states import TaskRunState
from beatflow.store import SensorPokes
from beatflow.worker.retry import retry_later

if TYPE_CHECKING:
    from beatflow.worker.attempt import Attempt

log = logging.getLogger(__name__)

POKE_KWARG = "poke"  # the message's keyword argument: the number of the poke it is for
# The longest countdown of one wait between pokes is BEATFLOW_MAX_COUNTDOWN_SECONDS (900 s by
# default); a longer wait is made of several (each message that wakes early waits again):
# execution/backoff.py says why (RabbitMQ's consumer_timeout, Redis's visibility timeout).


class SensorTimeout(Exception):
    """A sensor that was not done within its timeout: the task run fails without retries."""

    final = True  # attempt.handle_failure: no retry


def poke(attempt: Attempt, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Poke until done (poke mode) or once (reschedule mode); the done value is the result."""
    sensing = attempt.spec.sensor
    assert sensing is not None
    if sensing.mode == "poke":
        return _poke_in_place(attempt, sensing, args, kwargs)
    return _poke_once(attempt, sensing, args, kwargs)


def _call(attempt: Attempt, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    with canvas.sending_canvas(False):  # the user's own publishes are plain Celery
        return poked(attempt.spec.fn(*args, **kwargs))


def _poke_in_place(
    attempt: Attempt, sensing: SensorSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    started = time.monotonic()
    pokes = 0
    while True:
        pokes += 1
        done, value = _call(attempt, args, kwargs)
        if done:
            return value
        waited = time.monotonic() - started
        if waited >= sensing.timeout:
            _time_out(attempt, sensing, pokes, waited)
        time.sleep(min(sensing.interval(pokes), sensing.timeout - waited))


def _poke_once(
    attempt: Attempt, sensing: SensorSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    a = attempt
    now = datetime.now(UTC)
    recorded = a.runtime.store.sensor_pokes(a.key)
    if recorded is not None and recorded.try_number != a.try_number:
        recorded = None  # a new try (a retry, a clear): its pokes and timeout start afresh
    made = 0 if recorded is None else recorded.poke_count
    wanted = a.task.request.kwargs.get(POKE_KWARG) if a.task.request.kwargs else None
    if recorded is not None and isinstance(wanted, int) and wanted <= made:
        _put_back(a, recorded)
        log.info("sensor %s: poke %d was already made; duplicate message dropped", a.key, wanted)
        canvas.detach(a.task)  # what follows the sensor goes with the live message
        raise Ignore()
    if recorded is not None and recorded.next_poke_at - now > _tolerance():
        _put_back(a, recorded)  # early: wait again for the poke that is due
        _again(a, recorded, made + 1, now)
    first = now if recorded is None else recorded.first_poke_at
    done, value = _call(a, args, kwargs)
    if done:
        return value
    waited = (datetime.now(UTC) - first).total_seconds()
    if waited >= sensing.timeout:
        _time_out(a, sensing, made + 1, waited)
    wait = min(sensing.interval(made + 1), sensing.timeout - waited)
    pokes = SensorPokes(
        dedupe_key=a.key,
        task_id=a.spec.task_id,
        map_index=a.index,
        try_number=a.try_number,
        poke_count=made + 1,
        first_poke_at=first,
        next_poke_at=datetime.now(UTC) + timedelta(seconds=max(0.0, wait)),
    )
    note = f"poke {made + 1} not done; next poke at {pokes.next_poke_at.isoformat()}"
    _reschedule(a, pokes, note)
    log.info("sensor %s: %s", a.key, note)
    events.task_run_finished(a.dag.dag_id, a.spec.task_id, TaskRunState.UP_FOR_RESCHEDULE)
    _again(a, pokes, made + 2, datetime.now(UTC))


def _tolerance() -> timedelta:
    return timedelta(seconds=EARLY_TOLERANCE_SECONDS)


def _reschedule(attempt: Attempt, pokes: SensorPokes, note: str | None) -> None:
    """End this try up_for_reschedule with ``pokes``; stop (Ignore) if the lease was lost."""
    a = attempt
    a.runtime.leases.writing(a.key)
    if not a.runtime.store.reschedule_task_run(a.key, a.token, pokes, note=note):
        log.warning("sensor %s: this worker's lease was taken over; stopping", a.key)
        canvas.detach(a.task)
        raise Ignore()


def _put_back(attempt: Attempt, recorded: SensorPokes) -> None:
    when = recorded.next_poke_at.isoformat()
    _reschedule(attempt, recorded, f"poke {recorded.poke_count} not done; next poke at {when}")


def _again(attempt: Attempt, pokes: SensorPokes, number: int, now: datetime) -> NoReturn:
    """This message again, for poke ``number``, when ``pokes`` says it is due (or sooner, to
    wait again: ``countdown``)."""
    a = attempt
    due = (pokes.next_poke_at - now).total_seconds()
    settings = a.runtime.settings
    wait = countdown(due, settings.visibility_timeout, settings.max_countdown_seconds)
    kwargs = {**(a.task.request.kwargs or {}), POKE_KWARG: number}
    a.runtime.leases.release(a.key)
    retry_later(a.task, wait, kwargs=kwargs)


def _time_out(attempt: Attempt, sensing: SensorSpec, pokes: int, waited: float) -> NoReturn:
    why = f"sensor timed out after {waited:.1f}s and {pokes} poke(s) (timeout={sensing.timeout:g}s)"
    if sensing.soft_fail:
        raise Skip(why)
    raise SensorTimeout(why)
