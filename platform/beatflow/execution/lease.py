"""Lease renewal: one daemon thread per worker process renews the lease of every task run that
process is executing, every lease/3 seconds, so a live worker never loses its claim."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, renew: Callable[[str, str], bool], lease_seconds: float) -> None:
        self._renew = renew
        self._interval = max(0.05, lease_seconds / 3)
        self._held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, dedupe_key: str, token: str) -> None:
        with self._lock:
            self._held[dedupe_key] = token
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                # (re)start after a fork: threads do not survive into prefork children
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="beatflow-lease", daemon=True
                )
                self._thread.start()

    def release(self, dedupe_key: str) -> None:
        with self._lock:
            self._held.pop(dedupe_key, None)

    def _loop(self) -> None:
        while not self._wake.wait(self._interval):
            with self._lock:
                held = list(self._held.items())
            for key, token in held:
                try:
                    if not self._renew(key, token):
                        log.warning(
                            "lease on task run %s was taken over by another worker",
                            key,
                            extra={"dedupe_key": key},
                        )
                        self.release(key)
                except Exception:  # a DB blip must not kill the renewer
                    log.warning("could not renew lease on %s; will retry", key, exc_info=True)
