"""Whether any worker consumes the queues a DAG run's tasks are sent to: asked once by a follower
(``runs.follow``) whose run has no task running GRACE seconds in, through Celery's remote control
(``inspect().active_queues()``, on Redis and RabbitMQ alike), never by a worker."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from celery import Celery

from beatflow.dag.compile import task_name
from beatflow.errors import BeatflowError
from beatflow.runtime import Runtime
from beatflow.states import TaskRunState

if TYPE_CHECKING:
    from beatflow.store import TaskRunRecord

log = logging.getLogger(__name__)

GRACE = 5.0  # seconds a followed run may have no task running before the workers are asked
ASK_TIMEOUT = 1.0  # seconds the workers have to answer


@dataclass(frozen=True, slots=True)
class QueueCheck:
    """The queues of a run that no worker consumes, as found at ``at`` (UTC) from the answers of
    ``workers`` workers."""

    missing: tuple[str, ...]
    workers: int
    at: datetime


def run_queues(app: Celery, runtime: Runtime, dag_id: str) -> list[str]:
    """The queues a run of ``dag_id`` sends to: each task's (its ``queue=``, else the app's
    ``task_routes``, else the default queue) and the default queue (beatflow's own steps)."""
    router = app.amqp.router
    names = {str(app.conf.task_default_queue)}
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError:  # not loaded here: the default queue is still one to ask about
        return sorted(names)
    for spec in dag.tasks.values():
        options = {"queue": spec.queue} if spec.queue else {}
        names.add(router.route(options, task_name(dag_id, spec.task_id))["queue"].name)
    return sorted(names)


def check_queues(app: Celery, queues: Iterable[str], timeout: float = ASK_TIMEOUT) -> QueueCheck:
    """Ask every worker which queues it consumes (waits ``timeout`` for the answers)."""
    at = datetime.now(UTC)
    answers = app.control.inspect(timeout=timeout).active_queues() or {}
    consumed = {q["name"] for queues_of in answers.values() for q in queues_of or ()}
    return QueueCheck(tuple(q for q in queues if q not in consumed), len(answers), at)


class QueueWatch:
    """One follower's check: GRACE seconds in, if no task of the run runs, ask the workers and
    hand ``report`` the queues none consumes (not called when every queue has a consumer;
    without ``report``, never due)."""

    def __init__(
        self,
        runtime: Runtime,
        dag_id: str,
        run_id: str,
        report: Callable[[QueueCheck], None] | None,
    ) -> None:
        self.runtime, self.dag_id, self.run_id, self.report = runtime, dag_id, run_id, report
        self.due = math.inf if report is None else time.monotonic() + GRACE

    def due_in(self) -> float:
        """Seconds until the check (infinite once done)."""
        return max(0.0, self.due - time.monotonic())

    def look(self, tasks: list[TaskRunRecord] | None) -> None:
        """Check if due; ``tasks``: the run's task runs as just read (None: not read)."""
        if time.monotonic() < self.due:
            return
        self.due = math.inf
        try:
            if tasks is None:
                tasks = self.runtime.store.get_task_runs(self.dag_id, self.run_id)
            if any(t.state == TaskRunState.RUNNING for t in tasks):
                return  # it runs: a worker consumes its queue
            app = self.runtime.app
            check = check_queues(app, run_queues(app, self.runtime, self.dag_id))
        except Exception as exc:  # noqa: BLE001 - a hint only: the follow goes on without it
            log.debug("could not ask the workers for their queues: %s", exc)
            return
        if check.missing and self.report is not None:
            self.report(check)
