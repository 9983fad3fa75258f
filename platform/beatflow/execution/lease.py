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
        self._writing: set[str] = set()  # holders writing their outcome (see ``writing``)
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

    def writing(self, dedupe_key: str) -> None:
        """The holder is writing its outcome. A renewal that fails from here on is that write
        ending the lease (its success clears the lease) or a takeover the write itself
        reports: either way the renewer lets the lease go without a warning. Renewals go on
        meanwhile (a write that waits for the database keeps its lease)."""
        with self._lock:
            if dedupe_key in self._held:
                self._writing.add(dedupe_key)

    def release(self, dedupe_key: str) -> None:
        with self._lock:
            self._held.pop(dedupe_key, None)
            self._writing.discard(dedupe_key)

    def _lost(self, dedupe_key: str, token: str) -> bool:
        """A renewal of ``token`` failed: let that lease go; True if its loss is news (held,
        and its holder is not writing its outcome)."""
        with self._lock:
            if self._held.get(dedupe_key) != token:
                return False  # released meanwhile, or held again under a new try's token
            del self._held[dedupe_key]
            news = dedupe_key not in self._writing
            self._writing.discard(dedupe_key)
            return news

    def _loop(self) -> None:
        while not self._wake.wait(self._interval):
            with self._lock:
                held = list(self._held.items())
            for key, token in held:
                try:
                    if not self._renew(key, token) and self._lost(key, token):
                        log.warning(
                            "lease on task run %s was taken over by another worker",
                            key,
                            extra={"dedupe_key": key},
                        )
                except Exception:  # a DB blip must not kill the renewer
                    log.warning("could not renew lease on %s; will retry", key, exc_info=True)
