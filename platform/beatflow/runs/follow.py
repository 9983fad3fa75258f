"""Following a DAG run to its end (``beatflow dags trigger --wait``, the Python API): woken by the
run's announcements on Redis pub/sub (execution.announce), reading the results DB only when
woken, with a slow poll as the fallback for a lost message or an unreachable Redis."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from beatflow.errors import RunNotFoundError, StoreError, StoreUnavailableError
from beatflow.execution import announce
from beatflow.runs.consumers import QueueCheck, QueueWatch
from beatflow.runtime import Runtime
from beatflow.states import DAG_RUN_FINAL

if TYPE_CHECKING:
    from redis.client import PubSub

    from beatflow.store import DagRunRecord, Store, TaskRunRecord

log = logging.getLogger(__name__)

FALLBACK_POLL = 5.0  # seconds between reads when no announcement arrives
TASK_POLL = 1.0  # seconds between reads when following task changes too


class _Wakeups:
    """The run's channel, subscribed before the first read so no announcement is missed."""

    def __init__(self, runtime: Runtime, dag_id: str, run_id: str, *, tasks: bool) -> None:
        self.kinds = {announce.RUN, announce.TASK} if tasks else {announce.RUN}
        self.pubsub: PubSub | None = None
        self.marked = False  # the run is marked followed (its end is announced)
        self.dag_id, self.run_id = dag_id, run_id
        self.ended: DagRunRecord | None = None  # the run as its end was announced
        client = announce.client_of(runtime.app)
        if client is None:
            return
        try:
            self.pubsub = client.pubsub(ignore_subscribe_messages=True)
            self.pubsub.subscribe(announce.channel(dag_id, run_id))
        except (redis.RedisError, OSError) as exc:
            log.warning("cannot subscribe to the run's events (%s); polling instead", exc)
            self.close()

    def wait(self, seconds: float) -> None:
        """Return on an announcement of interest (then drain the ones queued behind it, so a
        burst costs one read) or after ``seconds``."""
        if self.pubsub is None:
            time.sleep(max(0.0, seconds))
            return
        until = time.monotonic() + max(0.0, seconds)
        try:
            while True:
                left = until - time.monotonic()
                message = self.pubsub.get_message(timeout=max(0.0, left))
                if message is not None and self._wakes(_kind(message)):
                    while (queued := self.pubsub.get_message(timeout=0.0)) is not None:
                        self._wakes(_kind(queued))
                    return
                if left <= 0:
                    return
        except (redis.RedisError, OSError) as exc:
            log.warning("lost the run's events (%s); polling instead", exc)
            self.close()

    def _wakes(self, data: str) -> bool:
        """Whether a message of ``data`` is one to wake on; keeps the run an end carries."""
        ended = announce.ended_run(data, self.dag_id, self.run_id)
        if ended is not None:
            self.ended = self.ended or ended
            return True
        return data in self.kinds

    def close(self) -> None:
        if self.pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self.pubsub.close()
            self.pubsub = None


def _read_run(store: Store, wakeups: _Wakeups, dag_id: str, run_id: str) -> DagRunRecord | None:
    """The run as it stands. The first read of a follower that listens marks the run followed
    in the same statement, so its end is announced (``store.follow_dag_run``); a database that
    refuses the mark (a read-only role) leaves the follower polling."""
    if wakeups.pubsub is None or wakeups.marked:
        return store.get_dag_run(dag_id, run_id)
    try:
        run = store.follow_dag_run(dag_id, run_id)
    except StoreUnavailableError:
        raise
    except StoreError as exc:
        log.warning("cannot mark %s/%s followed (%s); polling instead", dag_id, run_id, exc)
        wakeups.close()
        return store.get_dag_run(dag_id, run_id)
    wakeups.marked = True
    return run


def _read_all(
    store: Store, wakeups: _Wakeups, *, tasks: bool
) -> tuple[DagRunRecord | None, list[TaskRunRecord]]:
    """The run as it stands (``_read_run``) and, when ``tasks``, its task runs."""
    run = _read_run(store, wakeups, wakeups.dag_id, wakeups.run_id)
    return run, store.get_task_runs(run.dag_id, run.run_id) if run is not None and tasks else []


def _report_changes(
    tasks: list[TaskRunRecord],
    seen: dict[str, tuple[str, int]],
    on_task_change: Callable[[TaskRunRecord], None],
) -> None:
    """Call ``on_task_change`` on each task run whose state or try differs from ``seen``."""
    for t in tasks:
        marker = (t.state, t.try_number)
        if seen.get(t.dedupe_key) != marker:
            seen[t.dedupe_key] = marker
            on_task_change(t)


def _kind(message: dict[str, object]) -> str:
    data = message.get("data")
    return data.decode() if isinstance(data, bytes) else str(data)


def follow_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    on_task_change: Callable[[TaskRunRecord], None] | None = None,
    on_unconsumed: Callable[[QueueCheck], None] | None = None,
    timeout: float = 3600.0,
    poll: float = FALLBACK_POLL,
) -> DagRunRecord:
    """Watch a DAG run until it finishes; call ``on_task_change`` on every task state change.
    Reads the results DB when the run announces a change, and every ``poll`` seconds anyway;
    the run's announced end (the run as it ended) is returned as it came, without a read.
    ``on_unconsumed``: called (once at most) when, a few seconds in, no task of the run runs
    and no worker consumes one of its queues (``runs.consumers``); the wait goes on.

    Raises RunNotFoundError for an unknown run, TimeoutError if it has not finished after
    ``timeout`` seconds.
    """
    wakeups = listen(runtime, dag_id, run_id, tasks=on_task_change is not None)
    try:
        return follow_listening(
            runtime,
            wakeups,
            on_task_change=on_task_change,
            on_unconsumed=on_unconsumed,
            timeout=timeout,
            poll=poll,
        )
    finally:
        wakeups.close()


def listen(runtime: Runtime, dag_id: str, run_id: str, *, tasks: bool = False) -> _Wakeups:
    """Subscribe to the run's announcements (before the run is read, or triggered, so none is
    missed); ``tasks``: wake on its task changes too. Close it when done."""
    return _Wakeups(runtime, dag_id, run_id, tasks=tasks)


def follow_listening(
    runtime: Runtime,
    wakeups: _Wakeups,
    *,
    known: DagRunRecord | None = None,
    on_task_change: Callable[[TaskRunRecord], None] | None = None,
    on_unconsumed: Callable[[QueueCheck], None] | None = None,
    timeout: float = 3600.0,
    poll: float = FALLBACK_POLL,
) -> DagRunRecord:
    """``follow_run`` on a channel already listened to (``listen``). ``known``: the run as the
    caller read it after subscribing (a trigger's own record): when it is marked followed, its
    end will be announced, so the first read (and its mark) is skipped."""
    store = runtime.store
    dag_id, run_id = wakeups.dag_id, wakeups.run_id
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[str, int]] = {}
    watch = QueueWatch(runtime, dag_id, run_id, on_unconsumed)
    if on_task_change is not None:
        # only the run's end is announced (a publish per task run would tax every task): task
        # changes are read at this pace
        poll = min(poll, TASK_POLL)
    first = None  # the run as known, taken for the first read
    if known is not None and known.followed and wakeups.pubsub is not None:
        # marked followed and read after the subscription: its end cannot pass unannounced
        wakeups.marked = True
        first = known if on_task_change is None else None
    while True:
        if wakeups.ended is not None and on_task_change is None:
            return wakeups.ended  # the run as its end committed it: no read back
        run: DagRunRecord | None
        tasks: list[TaskRunRecord]
        if first is not None:
            run, tasks, first = first, [], None
        else:
            try:
                run, tasks = _read_all(store, wakeups, tasks=on_task_change is not None)
            except StoreUnavailableError as exc:
                # The run goes on without us: keep watching until the database is back.
                if time.monotonic() > deadline:
                    raise TimeoutError(f"results database unavailable: {exc}") from exc
                log.warning(
                    "results database unavailable while following %s/%s (%s); retrying",
                    dag_id,
                    run_id,
                    exc,
                )
                time.sleep(min(1.0, poll))
                continue
        if run is None:
            raise RunNotFoundError(dag_id, run_id)
        if on_task_change is not None:
            _report_changes(tasks, seen, on_task_change)
        if run.state in DAG_RUN_FINAL:
            return run
        watch.look(tasks if on_task_change is not None else None)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"DAG run {dag_id}/{run_id} still {run.state} after {timeout}s")
        wakeups.wait(min(poll, left, watch.due_in()))
