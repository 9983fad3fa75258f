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
from typing import Any

import redis
from celery import Celery
from celery.signals import beat_init
from redbeat.schedulers import acquire_distributed_beat_lock, get_redis

from beatflow import connections, keys
from beatflow.dag.loader import DagBag
from beatflow.errors import SchedulerError, SchemaOutOfDateError
from beatflow.runs.fire import (
    DISPATCH_TASK,
    FIRE_BATCH_TASK,
    create_scheduled_run,
    create_scheduled_runs,
    scheduled_draft,
)
from beatflow.scheduler import checks
from beatflow.scheduler.assets import AssetPass
from beatflow.scheduler.clock import Clock
from beatflow.scheduler.election import LeaderElection
from beatflow.scheduler.firing import Dispatcher
from beatflow.scheduler.folder import FolderLoader
from beatflow.scheduler.periodic import PeriodicTasks
from beatflow.scheduler.plan import Fire
from beatflow.scheduler.sync import specs_of, write_entries
from beatflow.settings import Settings, mask_url
from beatflow.store import Store

log = logging.getLogger(__name__)

# RedBeat acquires its lock in a beat_init handler with a blocking acquire() that a replica which
# once lost the lock never repeats (redbeat#306); our election replaces it.
beat_init.disconnect(acquire_distributed_beat_lock)


def redis_client(settings: Settings, *, timeout: float | None = None) -> redis.Redis:
    """A client (plain, TLS or through Sentinel) whose calls fail fast: a renewal must never
    hang past the lease."""
    timeout = timeout or max(0.2, settings.beat_lock_timeout / 3)
    return connections.redis_client(settings.effective_redbeat_url, timeout=timeout)


def failover_grace(settings: Settings) -> timedelta:
    """How late a tick may be and still count as a failover gap tick (fired whatever catchup
    says): one lease plus a few loop and renew intervals, with slack for a slow takeover."""
    return timedelta(
        seconds=2 * settings.beat_lock_timeout
        + 4 * settings.beat_loop_interval
        + 4 * settings.beat_renew_interval
        + 2.0
    )


class BeatflowScheduler(PeriodicTasks):
    """The beat scheduler ``celery -A beatflow beat`` runs (see ``settings.celery_config``)."""

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        runtime = getattr(app, "beatflow", None)
        # a plain Celery app (RedBeat's own test suite runs this way): beatflow's default
        # settings, and the Redis client RedBeat is configured with
        self.settings = runtime.settings if runtime is not None else Settings()
        super().__init__(app, *args, **kwargs)
        self.lock_key = None  # RedBeat's own lock code stays off: the election owns the lock
        self.loop_interval = float(self.max_interval)  # beat_max_loop_interval
        self.instance = self.settings.instance or f"{socket.gethostname()}:{os.getpid()}"
        self.clock = Clock(self.settings.test_clock_file)
        self.client = redis_client(self.settings) if runtime is not None else get_redis(app)
        self.election = LeaderElection(
            self.client,
            instance=self.instance,
            ttl=self.settings.beat_lock_timeout,
            renew_every=self.settings.beat_renew_interval,
            stall_timeout=self.settings.beat_stall_timeout,
        )
        self.folder = FolderLoader(
            self.settings.dags_path,
            hung_after=self.settings.beat_stall_timeout,
            skip_modules=self.settings.imports,
        )
        self._store: Store | None = None
        self.dispatcher = Dispatcher(
            self.client,
            self._create,
            self._send,
            failover_grace(self.settings),
            timedelta(seconds=self.settings.catchup_window),
            latest_logical_date=lambda d: self.store.latest_scheduled_logical_date(d),
            paused_dag_ids=lambda: self.store.paused_dag_ids(),
            newest_epoch=lambda: self.store.epoch_floor(),
            create_many=self._create_many,
        )
        self._started = False
        self._closed = False
        self._leading = False
        self._next_sync = 0.0
        self._load_errors: tuple[str, ...] = ()
        self._written_epoch = 0
        self.assets = AssetPass(lambda: self.store, self._send_dispatch)
        self._next_assets = 0.0
        self._schema_checked = False
        self._next_schema_note = 0.0

    @property
    def store(self) -> Store:
        """The beat's own connection to the results DB: every statement and connect bounded by
        ``beat_db_timeout``, so a hung database can only fail a tick, never hang the loop."""
        if self._store is None:
            s = self.settings
            self._store = Store(
                s.database_url,
                lease_seconds=s.lease_seconds,
                result_max_bytes=s.result_max_bytes,
                statement_timeout=s.beat_db_timeout,
            )
        return self._store

    # ---------------------------------------------------------------- RedBeat overrides

    def setup_schedule(self) -> None:
        """RedBeat writes (and deletes) entries here, before any lock is held: not us."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One loop of Celery's beat service; returns seconds to sleep. Never raises, but for
        SystemExit once the scheduler is closed: Celery's SIGTERM handler closes it and raises
        SystemExit in the loop, and should anything the loop was in swallow that exception,
        the next tick ends the loop instead of running on as a lockless follower forever."""
        if self._closed:
            raise SystemExit()
        try:
            return self._tick()
        except Exception:  # an exception here would end the beat process
            log.exception("beat %s: tick failed; trying again", self.instance)
            return self.loop_interval
        finally:
            self.election.mark_progress()  # a pass completed: the lease may be renewed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._started:
                self.election.stop(release=True)
            if self._store is not None:
                self._store.close()
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
            self._lease = None
            if time.monotonic() >= self._next_sync:
                self._sync(None)  # followers keep their specs fresh, writing nothing
            # a follower wakes as soon as the election thread gains the lock (clear, then look
            # again, so an acquisition between the two is never slept through)
            self.election.gained.clear()
            if self.election.lease() is not None or self.election.gained.wait(self.loop_interval):
                return 0.0
            return 0.01
        if not self._schema_ready():
            return self.loop_interval
        if not self._leading:
            self._leading = True
            self._next_sync = 0.0  # write the entries right after this first fire
            # a lost lock may mean Redis restarted empty: its queue bindings are gone, so
            # forget kombu's "already declared" cache and declare the queue again on publish
            self.producer.connection.declared_entities.clear()
            self._record_term(lease[1])
            self.assets.reset()
        now = self.clock.now()
        result = self.dispatcher.fire_due(now, lease)
        if result.fired:
            log.info("beat %s: fired %d tick(s) (epoch %d)", self.instance, result.fired, lease[1])
        self._run_assets(lease[1], now)
        if time.monotonic() >= self._next_sync:
            self._sync(lease)
        periodic_wait = self.fire_periodic(lease)
        if result.more:
            return 0.0
        wait = self.loop_interval if result.next_due is None else result.next_due - now.timestamp()
        if wait <= 0:  # due but not fired (a failure, retried later): never spin on it
            wait = self.loop_interval
        return max(0.005, min(self.loop_interval, wait, periodic_wait))

    def _schema_ready(self) -> bool:
        """Once per process, before the leader writes anything: is the results DB at the code's
        schema? While it is behind (a migration job not run yet) the leader fires nothing and
        says why once a minute, one line naming `beatflow db upgrade`, not a traceback per DAG
        and tick; it goes on by itself once the schema is there. An unreachable database is
        the tick's to handle (bounded statements, warnings): asked again on the next tick."""
        if self._schema_checked:
            return True
        try:
            self.store.ensure_ready()  # SQLite, the embedded default, is upgraded here
        except SchemaOutOfDateError as exc:
            if time.monotonic() >= self._next_schema_note:
                self._next_schema_note = time.monotonic() + 60.0
                log.error("beat %s: %s; waiting for it", self.instance, exc)
            return False
        except Exception:  # noqa: BLE001 - not the schema's doing: the tick goes on as ever
            return True
        self._schema_checked = True
        return True

    def _run_assets(self, epoch: int, now: Any) -> None:
        """The asset pass (scheduler.assets), at most once a loop interval; a failure is
        logged and the next pass tries again (its work is idempotent)."""
        if time.monotonic() < self._next_assets or self.folder.bag is None:
            return
        self._next_assets = time.monotonic() + self.settings.beat_loop_interval
        try:
            self.assets.run(self.folder.bag, epoch, now, self.store.paused_dag_ids)
        except Exception as exc:  # noqa: BLE001 - never let it stop the schedules
            log.warning("beat %s: asset pass failed (%s); trying again", self.instance, exc)

    def _send_dispatch(self, dag_ids: list[str]) -> None:
        self.app.send_task(
            DISPATCH_TASK,
            args=[dag_ids],
            queue=self.settings.default_queue,
            producer=self.producer,
            ignore_result=True,
        )

    def _start(self) -> None:
        self._started = True
        checks.check_eviction_policy(self.client)
        self._take_bag(self.folder.wait(self.settings.beat_stall_timeout / 2))
        self._sync(None)
        self._warm_up()
        self.election.start()

    def _record_term(self, epoch: int) -> None:
        """Record our epoch in the results DB at once: from now on a deposed leader's runs are
        refused there, even if it never fires again before waking up."""
        try:
            newest = self.store.raise_epoch_floor(epoch)
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
        self._take_bag(self.folder.poll())
        self.dispatcher.refresh_paused()  # keeps a standby's DB connection warm, too
        if lease is None:
            self.election.epoch_floor = max(
                self.election.epoch_floor, self.dispatcher.latest_epoch()
            )
        else:
            self._write_entries(lease)

    def _take_bag(self, bag: DagBag | None) -> None:
        if bag is None:
            return
        errors = tuple(str(e) for e in bag.errors)
        if errors != self._load_errors:
            self._load_errors = errors
            for line in errors:
                log.warning("beat: a DAG module does not load, its schedules are off: %s", line)
        self.dispatcher.specs = specs_of(bag)
        self._written_epoch = 0
        log.info(
            "beat %s: loaded %d scheduled DAGs in %.2fs",
            self.instance,
            len(self.dispatcher.specs),
            bag.seconds,
        )

    def _write_entries(self, lease: tuple[str, int]) -> None:
        token, epoch = lease
        specs = self.dispatcher.specs or {}
        try:
            self.write_declared(token, epoch)
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
        dag = self._bag().get(dag_id)
        create_scheduled_run(self.store, dag, fire.tick, fire.trigger, epoch)

    def _create_many(self, fires: Sequence[tuple[str, Fire]], epoch: int) -> None:
        """The runs of many fires in one fenced transaction; should one DAG's draft or run fail
        it, the dispatcher makes them DAG by DAG with ``_create``."""
        bag = self._bag()
        drafts = [scheduled_draft(bag.get(d), f.tick, f.trigger) for d, f in fires]
        create_scheduled_runs(self.store, drafts, epoch)

    def _bag(self) -> DagBag:
        if self.folder.bag is None:
            raise SchedulerError("the dags folder is not loaded yet")
        return self.folder.bag
