"""Plain Celery periodic tasks on the HA beat: RedBeat entries (saved at runtime with
``RedBeatSchedulerEntry(...).save()``, or declared in Celery's ``beat_schedule`` by a module of
BEATFLOW_IMPORTS — a module-level ``beat_schedule`` dict in Celery's format) fire under the
same lock, epoch and failover as DAGs.

RedBeat's own entry logic decides what is due; beatflow fences the writes: an entry is advanced
(last run, next due) by a Lua script that checks the lock token and the leader epoch *before*
its task is sent, so a deposed leader writes and sends nothing, and a new leader never sends a
tick the old one already sent (at most once: a crash between the advance and the publish loses
that one tick, as with RedBeat). Declared entries are written by the leader only."""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

import redis
from celery.beat import ScheduleEntry
from redbeat.decoder import RedBeatJSONEncoder
from redbeat.schedulers import RedBeatScheduler, RedBeatSchedulerEntry

from beatflow import keys
from beatflow.settings import Settings

log = logging.getLogger(__name__)

# KEYS: lock, epoch, entry, schedule; ARGV: token, epoch, meta json, score
_RESERVE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('get', KEYS[2]) ~= ARGV[2] then return 0 end
if redis.call('exists', KEYS[3]) == 0 then return 2 end
redis.call('hset', KEYS[3], 'meta', ARGV[3])
redis.call('zadd', KEYS[4], ARGV[4], KEYS[3])
return 1
"""


class NotSent(Exception):  # a signal inside apply_async, never seen by users
    """The entry was not advanced (the lease is gone, or the entry was deleted): do not send."""


class PeriodicTasks(RedBeatScheduler):  # type: ignore[misc]
    """The plain-entry half of BeatflowScheduler (which sets ``client`` and ``_lease``)."""

    client: redis.Redis
    settings: Settings
    _lease: tuple[str, int] | None = None
    _statics_epoch = 0

    def fire_periodic(self, lease: tuple[str, int]) -> float:
        """Send the due plain entries; seconds until one may be due again."""
        self._lease = lease
        remaining = [float(self.max_interval)]
        for entry in self.schedule.values():  # RedBeat: the due entries and the next one
            if keys.is_dag_entry(entry.key):
                continue
            next_time = self.maybe_due(entry, **self._maybe_due_kwargs)
            if next_time:
                remaining.append(float(next_time))
        return min(remaining)

    def maybe_due(self, entry: RedBeatSchedulerEntry, **kwargs: Any) -> float:
        is_due, next_time = entry.is_due()
        if is_due:
            try:
                result = self.apply_async(entry, **kwargs)
            except NotSent as exc:
                log.info("beat: periodic task %s not sent: %s", entry.name, exc)
            except Exception:  # one entry's failure must not stop the others
                log.exception("beat: sending periodic task %s (%s) failed", entry.name, entry.task)
            else:
                log.info(
                    "beat: sent periodic task %s (%s) id %s",
                    entry.name,
                    entry.task,
                    getattr(result, "id", "?"),
                )
        return float(next_time)

    def reserve(self, entry: RedBeatSchedulerEntry) -> RedBeatSchedulerEntry:
        """Advance the entry before its task is sent, fenced by the lock and the epoch."""
        if self._lease is None:
            raise NotSent("this beat does not lead")
        token, epoch = self._lease
        new = ScheduleEntry._next_instance(entry)  # last_run_at = now, run count + 1
        meta = json.dumps(
            {"last_run_at": new.last_run_at, "total_run_count": new.total_run_count},
            cls=RedBeatJSONEncoder,
        )
        done = self.client.register_script(_RESERVE)(
            keys=[keys.LOCK, keys.EPOCH, entry.key, keys.SCHEDULE],
            args=[token, epoch, meta, new.score],
        )
        if done == 0:
            self._lease = None
            raise NotSent(f"the lock or epoch {epoch} is no longer ours")
        if done == 2:
            raise NotSent("the entry was deleted")
        return new

    def declared_schedule(self) -> dict[str, Any]:
        """Celery's ``beat_schedule`` plus the ``beat_schedule`` dict of every BEATFLOW_IMPORTS
        module (a module cannot reach the app while the app imports it)."""
        declared = dict(self.app.conf.beat_schedule or {})
        for module in self.settings.imports:
            try:
                found = getattr(importlib.import_module(module), "beat_schedule", None)
            except Exception:  # an import error is the worker's to report; skip it here
                log.exception("beat: cannot import %s for its beat_schedule", module)
                continue
            if isinstance(found, dict):
                declared.update(found)
        return declared

    def write_declared(self, token: str, epoch: int) -> None:
        """Make Redis hold the entries of Celery's ``beat_schedule`` (once per term): new and
        changed ones written keeping their last run, the ones no longer declared removed."""
        if self._statics_epoch == epoch:
            return
        declared = self.declared_schedule()
        entries = []
        for name, spec in declared.items():
            try:
                entries.append(self._maybe_entry(name, spec))
            except Exception:  # a bad declaration must not hide the others
                log.exception("beat: beat_schedule entry %r is invalid; skipped", name)
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(keys.LOCK)
                if pipe.get(keys.LOCK) != token:
                    return
                previous = {str(m) for m in pipe.smembers(keys.STATICS)}
                metas = [pipe.hget(e.key, "meta") for e in entries]
                pipe.multi()
                for entry, meta in zip(entries, metas, strict=True):
                    if meta:
                        last = RedBeatSchedulerEntry.decode_meta(meta)["last_run_at"]
                        entry.last_run_at = last
                    pipe.hset(entry.key, "definition", _definition(entry))
                    pipe.hsetnx(
                        entry.key,
                        "meta",
                        json.dumps({"last_run_at": entry.last_run_at}, cls=RedBeatJSONEncoder),
                    )
                    pipe.zadd(keys.SCHEDULE, {entry.key: entry.score})
                for name in previous - set(declared):
                    key = RedBeatSchedulerEntry.generate_key(self.app, name)
                    pipe.delete(key)
                    pipe.zrem(keys.SCHEDULE, key)
                    pipe.srem(keys.STATICS, name)
                    log.info("beat: periodic task %s is no longer declared: removed", name)
                if declared:
                    pipe.sadd(keys.STATICS, *declared)
                pipe.execute()
            except redis.WatchError:
                return
        self._statics_epoch = epoch
        if entries:
            log.info("beat: %d declared periodic task(s) written", len(entries))


def _definition(entry: RedBeatSchedulerEntry) -> str:
    return json.dumps(
        {
            "name": entry.name,
            "task": entry.task,
            "args": entry.args,
            "kwargs": entry.kwargs,
            "options": entry.options,
            "schedule": entry.schedule,
            "enabled": entry.enabled,
        },
        cls=RedBeatJSONEncoder,
    )
