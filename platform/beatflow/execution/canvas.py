"""Continuing a canvas past a task that failed for good, so Celery can record the failure.

Celery stops a chain at a task that raises and fails the chord it belongs to (the Redis backend
turns a FAILURE part into a ChordError for the body). beatflow wants both: Celery (Flower,
celery-exporter, the ``task_failure`` signal, Sentry) must see FAILURE, and the DAG must go on so
trigger rules decide. So the node wrapper, on a final failure, first does by hand what Celery's
tracer does after a success — apply the ``link`` callbacks, send the chain's next step, return
this chord part as done — then detaches the request from the canvas (no chain, no callbacks, no
chord) and raises the task's exception: Celery records FAILURE and has nothing left to fail.

After a success, a chain's next step goes the same way (``send_chain_step``), only to send it
with its ``task-sent`` event in one round trip to the broker instead of Celery's two.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

from celery import Task as CeleryTask
from celery import group, signature
from celery import states as celery_states
from celery.app.task import Context
from celery.backends.redis import RedisBackend, SentinelBackend

from beatflow.execution.send import sending_together

log = logging.getLogger(__name__)

_CONTINUED = "beatflow_canvas_continued"


def fail_for_good(task: CeleryTask, exc: BaseException) -> None:
    """Continue ``task``'s canvas, then raise ``exc`` so Celery records FAILURE."""
    continue_canvas(task)
    raise exc


def continue_canvas(task: CeleryTask) -> None:
    """Send what would follow ``task`` had it succeeded (once per request), then detach it."""
    request = task.request
    if getattr(request, _CONTINUED, False):
        return
    _send_next(task.app, task.backend, request)
    detach(task)


def detach(task: CeleryTask) -> None:
    """Leave nothing for Celery to continue after ``task`` (no callbacks, chain or chord):
    what followed it was sent, or will be (a .map() expansion's fan-in)."""
    request = task.request
    request.callbacks = None
    request.chain = None
    request.chord = None
    setattr(request, _CONTINUED, True)


def send_chain_step(task: CeleryTask) -> bool:
    """Send the next step of ``task``'s chain now, with its ``task-sent`` event, in one round
    trip to the broker (``execution.send.sending_together``), then detach: Celery's tracer,
    which would send the two one after the other once the task returns, sends nothing. Only a
    chain's plain step: a task with ``link`` callbacks or a chord to count is left to the tracer.

    If the send fails (after the publish retry policy, about 1.5 s), the request stays
    attached and the tracer sends the step as it always has (its own retries, then FAILURE if
    the broker stays away); a copy that did arrive the first time is harmless, its task run
    being claimed once by its dedupe key. Returns whether the step went here."""
    request = task.request
    if not request.chain or request.callbacks or request.chord or is_continued(task):
        return False
    if request.is_eager:  # nothing to send: the chain runs in this process
        return False
    if task.app.conf.task_inherit_parent_priority:  # the tracer passes the priority on
        return False
    try:
        with sending_together(task.app):
            _send_next(task.app, task.backend, request)
    except Exception as exc:  # noqa: BLE001 - the tracer's own send is the fallback
        log.warning("could not send the chain's next step of %s (%s); Celery sends it", task.name,
                    exc)  # fmt: skip
        return False
    detach(task)
    return True


# the request fields that say what follows a task in its canvas
_CANVAS_FIELDS = ("id", "root_id", "group", "group_index", "chord", "chain", "callbacks")


def captured(task: CeleryTask) -> dict[str, Any]:
    """What follows ``task`` in its canvas, as JSON (stored with a .map() expansion's fan-in,
    sent by ``continue_captured`` once the last instance ends)."""
    request = task.request
    return {name: getattr(request, name, None) for name in _CANVAS_FIELDS}


def continue_captured(app: Any, canvas: dict[str, Any]) -> None:
    """Send what ``captured`` recorded, as Celery would have after that task's success."""
    fields = {name: canvas.get(name) for name in _CANVAS_FIELDS}
    _send_next(app, app.backend, Context(fields))


def _send_next(app: Any, backend: Any, request: Any) -> None:
    parent = {"parent_id": request.id, "root_id": request.root_id or request.id}
    for callback in _callback_signatures(request.callbacks, app):
        callback.apply_async((None,), **parent)
    chain = list(request.chain or ())
    if chain:
        # The chain is stored reversed: the next step is the last element.
        step = signature(chain[-1], app=app)
        step.apply_async((None,), chain=chain[:-1], **parent)
    if request.chord:
        # Count this part as done without an error, so the chord's body (the next DAG level)
        # is sent when the other parts finish, instead of a ChordError.
        backend.on_chord_part_return(request, celery_states.SUCCESS, None)


def is_continued(task: CeleryTask) -> bool:
    """Whether this request's canvas was already continued (its failure is Celery's now)."""
    return bool(getattr(task.request, _CONTINUED, False))


def _callback_signatures(callbacks: Any, app: Any) -> list[Any]:
    if not callbacks:
        return []
    sigs = [signature(s, app=app) for s in callbacks]
    plain = [s for s in sigs if not isinstance(s, group)]
    groups = [s for s in sigs if isinstance(s, group)]
    # As Celery's tracer does: several plain callbacks go out as one group (issue #1936).
    if len(plain) > 1:
        return [*groups, group(plain, app=app)]
    return [*groups, *plain]


# ------------------------------------------------------------------ chords count parts only


# True: what is published now is beatflow canvas; False: user code runs (it may wait on its
# own results); None: a beatflow task's publishing (its body around the user's function, and
# Celery's tracer sending its chain's next step or its chord's body) is canvas too.
_SENDING_CANVAS: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "beatflow_sending_canvas", default=None
)


@contextlib.contextmanager
def sending_canvas(sending: bool = True) -> Iterator[None]:
    """Publish beatflow canvas in this block (no result subscriptions for it, see
    ``_CountOnlyChords.add_pending_result``); ``sending=False``: user code runs in it, whose
    results are waited on as Celery does."""
    token = _SENDING_CANVAS.set(sending)
    try:
        yield
    finally:
        _SENDING_CANVAS.reset(token)


def _sends_canvas(app: Any) -> bool:
    sending = _SENDING_CANVAS.get()
    if sending is None:
        return bool(getattr(app.current_worker_task, "beatflow_canvas", False))
    return sending


class _CountOnlyChords:
    """Chords whose header holds a group or a chord (a parallel branch that fans out and back
    in) made Celery's Redis backend save the header's GroupResult and, on the last part, *join*
    the header tasks' stored results. beatflow's tasks store none (results live in the results
    DB), so that join waited result_chord_join_timeout and failed the body: the DAG run hung.
    beatflow's signatures are immutable, so the body needs no header results: never save the
    GroupResult, and the last part sends the body from the part count alone."""

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        return None

    def add_pending_result(
        self, result: Any, weak: bool = False, start_drainer: bool = True
    ) -> Any:
        """Celery subscribes the sender of a group to the result channel of every member (for
        the group's barrier), and unsubscribes when a result arrives. No beatflow task stores a
        result, so in a worker every fan-out level and .map() instance it sent stayed subscribed
        for the worker's life (celery#3812), and cost a SUBSCRIBE each. Nothing waits on
        beatflow canvas: while it is sent, no wait is registered. User code (a task's function,
        a plain task) waits on its own results as Celery does."""
        if _sends_canvas(self.app):  # type: ignore[attr-defined]
            return result
        return super().add_pending_result(result, weak=weak, start_drainer=start_drainer)  # type: ignore[misc]


class CountingRedisBackend(_CountOnlyChords, RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend whose chords only count their parts."""


class CountingSentinelBackend(_CountOnlyChords, SentinelBackend):  # type: ignore[misc]
    """Celery's Redis Sentinel result backend whose chords only count their parts."""


def counting_backend(url: str) -> str | None:
    """The ``Celery.backend_cls`` value for result backend ``url`` (``module:Class+url``), or
    None for a URL Celery's own backend should handle."""
    scheme = url.partition("://")[0]
    if scheme in ("redis", "rediss"):
        return f"{__name__}:CountingRedisBackend+{url}"
    if scheme == "sentinel":
        return f"{__name__}:CountingSentinelBackend+{url}"
    return None
