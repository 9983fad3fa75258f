"""Leader election: a token-checked Redis lease that every beat replica competes for, for its whole
life. A timer thread acquires, renews and (on loss) steps down; ticking never touches the lease.
The thread renews only while the tick loop makes progress: a leader whose loop has not completed
a pass within ``stall_timeout`` releases the lock and stops competing until the loop moves."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

import redis

from beatflow import keys

log = logging.getLogger(__name__)

# KEYS: lock, epoch, leader; ARGV: token, ttl ms, instance, now (unix s), epoch floor
_ACQUIRE = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('incr', KEYS[2])
  local floor = tonumber(ARGV[5])
  if epoch <= floor then
    epoch = floor + 1
    redis.call('set', KEYS[2], epoch)
  end
  local value = cjson.encode({instance=ARGV[3], epoch=epoch, since=tonumber(ARGV[4])})
  redis.call('set', KEYS[3], value, 'PX', ARGV[2])
  return epoch
end
return 0
"""
# KEYS: lock, leader; ARGV: token, ttl ms
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('pexpire', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# KEYS: lock, leader; ARGV: token
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('del', KEYS[2])
  return 1
end
return 0
"""


class LeaderElection:
    """Compete for ``keys.LOCK``; ``is_leader()`` is true only while the lease is surely ours.

    The lease counts as ours until ``ttl`` after the last renewal *request* was sent, minus a
    safety margin for clock-rate drift between us and Redis: fail closed, never tick without a
    confirmed lease (two replicas must never both fire).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        instance: str,
        ttl: float,
        renew_every: float,
        on_change: Callable[[bool, int], None] | None = None,
        stall_timeout: float | None = None,
    ) -> None:
        self.client = client
        self.stall_timeout = stall_timeout
        self._progress = time.monotonic()
        self.instance = instance
        self.ttl = ttl
        self.renew_every = renew_every
        self.on_change = on_change
        self.token = ""
        self.epoch = 0
        # the highest epoch the results DB has seen: keeps epochs growing even when Redis
        # restarts empty (the scheduler refreshes it)
        self.epoch_floor = 0
        self.gained = threading.Event()  # set on every acquisition (the tick loop waits on it)
        self._valid_until = 0.0
        self._leader = False
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._redis_down = False

    # ---------------------------------------------------------------- state

    def is_leader(self) -> bool:
        with self._mutex:
            return self._leader and time.monotonic() < self._valid_until

    def lease(self) -> tuple[str, int] | None:
        """(token, epoch) while we lead, else None: what fenced writes carry."""
        with self._mutex:
            if self._leader and time.monotonic() < self._valid_until:
                return self.token, self.epoch
            return None

    def mark_progress(self) -> None:
        """The tick loop completed a pass (it calls this at the end of every tick)."""
        self._progress = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the loop last completed a pass, if over ``stall_timeout``; else 0."""
        age = time.monotonic() - self._progress
        return age if self.stall_timeout is not None and age > self.stall_timeout else 0.0

    # ---------------------------------------------------------------- life cycle

    def start(self) -> None:
        self.mark_progress()
        self.step()  # first attempt synchronously: a lone beat leads from its first tick
        self._thread = threading.Thread(target=self._run, name="beatflow-beat-lease", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop competing; with ``release`` delete the lock at once so a standby takes over."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.renew_every + 2.0)
        with self._mutex:
            was_leader, token = self._leader, self.token
            self._leader = False
        if release and was_leader:
            try:
                if self._release(keys=[keys.LOCK, keys.LEADER], args=[token]):
                    log.info("beat %s released the lock (epoch %d)", self.instance, self.epoch)
            except redis.RedisError as exc:
                log.warning(
                    "beat %s could not release the lock (%s); it expires in %.1fs",
                    self.instance,
                    exc,
                    self.ttl,
                )
        with contextlib.suppress(redis.RedisError):
            self.client.delete(keys.replica_key(self.instance))

    def _run(self) -> None:
        while not self._stop.wait(self.renew_every):
            self.step()

    def step(self) -> None:
        """One election round: renew if we lead, else try to acquire. Never raises."""
        ttl_ms = int(self.ttl * 1000)
        sent = time.monotonic()
        stalled = self.stalled_for()
        try:
            if stalled:
                # a stuck loop fires nothing: hand the lock over instead of renewing it
                if self._leader:
                    self._step_down(f"the tick loop has not completed a pass for {stalled:.1f}s")
                    self._release(keys=[keys.LOCK, keys.LEADER], args=[self.token])
            elif self._leader:
                ok = bool(self._renew(keys=[keys.LOCK, keys.LEADER], args=[self.token, ttl_ms]))
                if ok:
                    self._confirm(sent)
                else:
                    self._step_down("the lock is held by another beat or expired")
            else:
                token = uuid.uuid4().hex
                epoch = int(
                    self._acquire(
                        keys=[keys.LOCK, keys.EPOCH, keys.LEADER],
                        args=[
                            token,
                            ttl_ms,
                            self.instance,
                            time.time(),
                            max(self.epoch_floor, self.epoch),
                        ],
                    )
                )
                if epoch:
                    with self._mutex:
                        self.token, self.epoch, self._leader = token, epoch, True
                    self._confirm(sent)
                    log.info("beat %s gained the lock: leader epoch %d", self.instance, epoch)
                    self.gained.set()
                    if self.on_change is not None:
                        self.on_change(True, epoch)
            self._heartbeat()
            if self._redis_down:
                self._redis_down = False
                log.info("beat %s reached Redis again", self.instance)
        except redis.RedisError as exc:
            if not self._redis_down:
                self._redis_down = True
                log.warning(
                    "beat %s cannot reach Redis (%s); retrying every %.1fs",
                    self.instance,
                    exc,
                    self.renew_every,
                )
            if self._leader and time.monotonic() >= self._valid_until:
                self._step_down("the lease ran out while Redis was unreachable")
        except Exception:  # the election thread must outlive any surprise
            log.exception("beat %s: unexpected error in the election loop", self.instance)

    def _confirm(self, sent: float) -> None:
        with self._mutex:
            # 10% margin: Redis may count the TTL down slightly faster than our monotonic clock
            self._valid_until = sent + self.ttl * 0.9

    def _step_down(self, why: str) -> None:
        with self._mutex:
            was, self._leader = self._leader, False
        if was:
            log.warning(
                "beat %s lost the lock (%s): stepping down to follower, epoch %d",
                self.instance,
                why,
                self.epoch,
            )
            if self.on_change is not None:
                self.on_change(False, self.epoch)

    def _heartbeat(self) -> None:
        role = "leader" if self.is_leader() else "follower"
        now = time.time()
        value = json.dumps(
            {
                "instance": self.instance,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "role": role,
                "epoch": self.epoch,
                "seen": round(now, 3),
                # when the tick loop last completed a pass: what `beatflow health beat` judges
                "loop_seen": round(now - (time.monotonic() - self._progress), 3),
                "stall_timeout": self.stall_timeout,
            }
        )
        self.client.set(keys.replica_key(self.instance), value, px=int(self.ttl * 3000))
