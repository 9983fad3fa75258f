"""``Notifier``, the base class of the objects an ``on_*_callback`` can be, and the context every
callback gets.

A plain callable given as a callback is called in the worker, in process, once the state is
committed. A ``Notifier`` is not: its event goes to the outbox and a ``beatflow.notify`` task
sends it off the task's path, at most once, with retries (``notify.deliver``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

# a Notifier's sends are tried this many times (exponential waits with jitter in between)
DEFAULT_TRIES = 3


class Notifier:
    """Something that tells a human (or a system) about an event. Subclass it and define
    :meth:`notify`; give an instance as a callback: ``@task(on_failure_callback=MyNotifier())``.

    ``notify`` runs in a ``beatflow.notify`` task, never in the task it tells of; raising from
    it makes the delivery try again (``tries`` in all, exponential waits in between), then it
    is recorded failed. ``tries=1``: one try only."""

    tries: int = DEFAULT_TRIES
    max_wait: float = 30.0  # seconds, the longest wait between two tries

    def __init__(self, *, tries: int = DEFAULT_TRIES) -> None:
        if not isinstance(tries, int) or isinstance(tries, bool) or tries < 1:
            raise ValueError(f"tries must be an integer of 1 or more, got {tries!r}")
        self.tries = tries

    def notify(self, context: Mapping[str, Any]) -> None:
        """Send the event described by ``context`` (see :func:`message`)."""
        raise NotImplementedError(f"{type(self).__name__} must define notify(context)")

    def __call__(self, context: Mapping[str, Any]) -> None:
        # a notifier called as a plain callback (e.g. by hand, or in a test) just notifies
        self.notify(context)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def subject(context: Mapping[str, Any]) -> str:
    """One line for a context: ``[beatflow] etl.load failed (try 2)``, or the DAG run's."""
    where = context["dag_id"]
    if context.get("task_id"):
        where = f"{where}.{context['task_id']}"
        if (context.get("map_index") or -1) >= 0:
            where = f"{where}[{context['map_index']}]"
    text = f"[beatflow] {where} {context.get('state')}"
    if context.get("task_id") and context.get("try_number"):
        text = f"{text} (try {context['try_number']})"
    return text


def message(context: Mapping[str, Any]) -> str:
    """The default text of a notification: its subject, the run, and the error if any."""
    lines = [subject(context), f"run: {context['run_id']}"]
    if context.get("logical_date"):
        lines.append(f"logical date: {context['logical_date']}")
    if context.get("exception"):
        lines.append(f"error: {context['exception']}")
    if context.get("reason"):
        lines.append(f"reason: {context['reason']}")
    return "\n".join(lines)


def make_context(
    *,
    event: str,
    dag_id: str,
    run_id: str,
    state: str,
    task_id: str | None = None,
    map_index: int = -1,
    try_number: int | None = None,
    exception: str | None = None,
    reason: str | None = None,
    logical_date: datetime | None = None,
    conf: Mapping[str, Any] | None = None,
    dedupe_key: str | None = None,
) -> dict[str, Any]:
    """The context a callback gets: a JSON object (it travels in the outbox and in messages),
    ``logical_date`` as an ISO 8601 string."""
    return {
        "event": event,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "try_number": try_number,
        "state": str(state),
        "exception": exception,
        "reason": reason,
        "logical_date": None if logical_date is None else logical_date.isoformat(),
        "conf": dict(conf or {}),
        "params": dict(conf or {}),
        "dedupe_key": dedupe_key,
    }


def event_key(context: Mapping[str, Any], index: int) -> str:
    """The key of one notifier's event: DAG, run, task (``@dag`` for the run's end), map
    index, try (0 for a skip, however it was recorded: a task run is skipped once), event and
    the notifier's place in its callback list."""
    task = context.get("task_id") or "@dag"
    tried = 0 if context["event"] == "skipped" else context.get("try_number") or 0
    return "/".join(
        str(part)
        for part in (
            context["dag_id"],
            context["run_id"],
            task,
            context.get("map_index", -1),
            tried,
            context["event"],
            index,
        )
    )
