"""BeatflowScheduler: RedBeat's scheduler with the lock taken over by a leader election that every
replica runs for its whole life, schedule writes reserved to the leader, and DAG ticks fired from
per-DAG watermarks (so the ticks of a failover gap fire once, on the new leader)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import beat_init
from redbeat.schedulers import RedBeatScheduler, acquire_distributed_beat_lock

from beatflow.dag.loader import discover
from beatflow.runs.fire import FIRE_BATCH_TASK, create_scheduled_run
from beatflow.scheduler import checks, keys
from beatflow.scheduler.clock import Clock
from beatflow.scheduler.election import LeaderElection
from beatflow.scheduler.firing import Dispatcher
from beatflow.scheduler.plan import Fire
from beatflow.scheduler.sync import specs_of, write_entries
from beatflow.settings import Settings, mask_url

log = logging.getLogger(__name__)

# RedBeat acquires its lock in a beat_init handler with a blocking acquire() that a replica which
# once lost the lock never repeats (redbeat#306); our election replaces it.
beat_init.disconnect(acquire_distributed_beat_lock)


def redis_client(settings: Settings) -> redis.Redis:
    """A client whose calls fail fast: a renewal must never hang past the lease."""
    timeout = max(0.2, settings.beat_lock_timeout / 3)
    return redis.Redis.from_url(
        settings.effective_redbeat_url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry_on_timeout=False,
    )


def failover_grace(settings: Settings) -> timedelta:
    """How late a tick may be and still count as a failover gap tick (fired whatever catchup
    says): one lease plus a few loop and renew intervals, with slack for a slow takeover."""
    return timedelta(
        seconds=2 * settings.beat_lock_timeout
        + 4 * settings.beat_loop_interval
        + 4 * settings.beat_renew_interval
        + 2.0
    )


def folder_signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of every DAG module: the folder is re-imported only when it changes."""
    out = []
    for path in discover(folder):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


class BeatflowScheduler(RedBeatScheduler):  # type: ignore[misc]
    """The beat scheduler ``celery -A beatflow beat`` runs (see ``settings.celery_config``)."""

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        from beatflow.runtime import runtime_of

        self.settings = runtime_of(app).settings
        super().__init__(app, *args, **kwargs)
        self.lock_key = None  # RedBeat's own lock code stays off: the election owns the lock
        self.loop_interval = self.settings.beat_loop_interval
        self.instance = self.settings.instance or f"{socket.gethostname()}:{os.getpid()}"
        self.clock = Clock(self.settings.test_clock_file)
        self.client = redis_client(self.settings)
        self.election = LeaderElection(
            self.client,
            instance=self.instance,
            ttl=self.settings.beat_lock_timeout,
            renew_every=self.settings.beat_renew_interval,
        )
        self.dispatcher = Dispatcher(
            self.client,
            self._create,
            self._send,
            failover_grace(self.settings),
            timedelta(seconds=self.settings.catchup_window),
            latest_logical_date=lambda d: self._runtime().store.latest_scheduled_logical_date(d),
            paused_dag_ids=lambda: self._runtime().store.paused_dag_ids(),
            newest_epoch=lambda: self._runtime().store.epoch_floor(),
        )
        self._started = False
        self._closed = False
        self._leading = False
        self._next_sync = 0.0
        self._load_errors: tuple[str, ...] = ()
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._written_epoch = 0

    # ---------------------------------------------------------------- RedBeat overrides

    def setup_schedule(self) -> None:
        """RedBeat writes (and deletes) entries here, before any lock is held: not us."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One loop of Celery's beat service; returns seconds to sleep. Never raises."""
        try:
            return self._tick()
        except Exception:  # an exception here would end the beat process
            log.exception("beat %s: tick failed; trying again", self.instance)
            return self.loop_interval

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._started:
                self.election.stop(release=True)
        super().close()

    @property
    def info(self) -> str:
        s = self.settings
        return (
            f"       . redis -> {mask_url(s.effective_redbeat_url)}\n"
            f"       . lock -> lease {s.beat_lock_timeout}s renewed every "
            f"{s.beat_renew_interval}s; loop {s.beat_loop_interval}s; "
            f"sync every {s.schedule_sync_interval}s"
        )

    # ---------------------------------------------------------------- the loop

    def _tick(self) -> float:
        if not self._started:
            self._start()
        lease = self.election.lease()
        if lease is None:
            self._leading = False
            if time.monotonic() >= self._next_sync:
                self._sync(None)  # followers keep their specs fresh, writing nothing
            # a follower wakes as soon as the election thread gains the lock (clear, then look
            # again, so an acquisition between the two is never slept through)
            self.election.gained.clear()
            if self.election.lease() is not None or self.election.gained.wait(self.loop_interval):
                return 0.0
            return 0.01
        if not self._leading:
            self._leading = True
            self._next_sync = 0.0  # write the entries right after this first fire
            # a lost lock may mean Redis restarted empty: its queue bindings are gone, so
            # forget kombu's "already declared" cache and declare the queue again on publish
            self.producer.connection.declared_entities.clear()
            self._record_term(lease[1])
        now = self.clock.now()
        result = self.dispatcher.fire_due(now, lease)
        if result.fired:
            log.info("beat %s: fired %d tick(s) (epoch %d)", self.instance, result.fired, lease[1])
        if time.monotonic() >= self._next_sync:
            self._sync(lease)
        if result.more:
            return 0.0
        if result.next_due is None:
            return self.loop_interval
        wait = result.next_due - now.timestamp()
        if wait <= 0:  # due but not fired (a failure, retried later): never spin on it
            return self.loop_interval
        return max(0.005, min(self.loop_interval, wait))

    def _start(self) -> None:
        self._started = True
        checks.check_eviction_policy(self.client)
        self._sync(None)
        self._warm_up()
        self.election.start()

    def _record_term(self, epoch: int) -> None:
        """Record our epoch in the results DB at once: from now on a deposed leader's runs are
        refused there, even if it never fires again before waking up."""
        try:
            newest = self._runtime().store.raise_epoch_floor(epoch)
        except Exception as exc:  # noqa: BLE001 - each run we create raises it anyway
            log.warning("beat %s: cannot record epoch %d yet (%s)", self.instance, epoch, exc)
            return
        if newest > epoch:
            log.warning(
                "beat %s: epoch %d is older than epoch %d in the results DB",
                self.instance,
                epoch,
                newest,
            )

    def _warm_up(self) -> None:
        """Open the broker and DB connections now: a standby that takes over must fire at once,
        not spend its first half second connecting."""
        try:
            self.producer.connection.ensure_connection(max_retries=1)
        except Exception as exc:  # noqa: BLE001 - the loop retries; this is only a head start
            log.warning("beat %s: broker not reachable yet (%s)", self.instance, exc)
        self.dispatcher.refresh_paused()

    def _sync(self, lease: tuple[str, int] | None) -> None:
        """Reload the dags folder if a file changed; as leader, make the entries match."""
        self._next_sync = time.monotonic() + self.settings.schedule_sync_interval
        signature = folder_signature(self.settings.dags_path)
        if signature != self._signature or self.dispatcher.specs is None:
            started = time.perf_counter()
            try:
                bag = self._runtime().reload()
            except Exception:  # noqa: BLE001 - keep the last good specs
                log.exception("beat %s: loading the dags folder failed", self.instance)
                return
            errors = tuple(str(e) for e in bag.errors)
            if errors != self._load_errors:
                self._load_errors = errors
                for line in errors:
                    log.warning("beat: a DAG module does not load, its schedules are off: %s", line)
            self.dispatcher.specs = specs_of(bag)
            self._signature = signature
            self._written_epoch = 0
            log.info(
                "beat %s: loaded %d scheduled DAGs in %.2fs",
                self.instance,
                len(self.dispatcher.specs),
                time.perf_counter() - started,
            )
        self.dispatcher.refresh_paused()  # keeps a standby's DB connection warm, too
        if lease is None:
            self.election.epoch_floor = max(
                self.election.epoch_floor, self.dispatcher.latest_epoch()
            )
        else:
            self._write_entries(lease)

    def _write_entries(self, lease: tuple[str, int]) -> None:
        token, epoch = lease
        specs = self.dispatcher.specs or {}
        try:
            # unchanged folder, same term, Redis still holds them all: nothing to compare
            if self._written_epoch == epoch and self.client.hlen(keys.FINGERPRINTS) == len(specs):
                return
            started = time.perf_counter()
            result = write_entries(self.client, token, specs, self.clock.now())
        except redis.RedisError as exc:
            log.warning(
                "beat %s: writing schedule entries failed (%s); retrying at the next sync",
                self.instance,
                exc,
            )
            self._next_sync = time.monotonic() + self.loop_interval
            return
        if result.applied:
            self._written_epoch = epoch
            if result.written or result.removed:
                log.info(
                    "beat %s: schedule sync wrote %d and removed %d entries in %.2fs "
                    "(%d unchanged)",
                    self.instance,
                    result.written,
                    result.removed,
                    time.perf_counter() - started,
                    result.unchanged,
                )

    def _send(self, fires: Sequence[tuple[str, Fire]], epoch: int) -> None:
        payload = [[dag_id, f.tick.isoformat(), f.trigger] for dag_id, f in fires]
        self.app.send_task(
            FIRE_BATCH_TASK,
            args=[payload, epoch],
            queue=self.settings.default_queue,
            producer=self.producer,
            ignore_result=True,
        )
        if log.isEnabledFor(logging.DEBUG):
            for dag_id, tick, trigger in payload:
                log.debug(
                    "beat: fired DAG %s tick %s (%s, epoch %d)",
                    dag_id,
                    tick,
                    trigger,
                    epoch,
                    extra={"dag_id": dag_id},
                )

    def _create(self, dag_id: str, fire: Fire, epoch: int) -> None:
        create_scheduled_run(self._runtime(), dag_id, fire.tick, fire.trigger, epoch)

    def _runtime(self) -> Any:
        from beatflow.runtime import runtime_of

        return runtime_of(self.app)
