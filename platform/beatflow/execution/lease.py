"""Lease renewal: one daemon thread per worker process renews the lease of every task run that
process is executing, every lease/3 seconds, so a live worker never loses its claim. A lease
lost anyway is reported with why: another worker took the task run over, or it ended meanwhile
(:func:`ended_meanwhile`: an operator cancelled or marked its run)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from beatflow.states import TASK_RUN_FINAL

if TYPE_CHECKING:
    from beatflow.store import TaskRunRecord

log = logging.getLogger(__name__)

TAKEN_OVER = "this worker's lease was taken over by another worker"


def ended_meanwhile(record: TaskRunRecord | None) -> str | None:
    """Why the holder of a task run's lease lost it when the task run ended without it (its run
    cancelled or marked by an operator: the task runs end and their leases are dropped), from
    the task run as it is now; None when it did not end (another worker holds it)."""
    if record is None or record.state not in TASK_RUN_FINAL:
        return None
    why = f" ({record.error})" if record.error else ""
    return f"it ended meanwhile as {record.state}{why}"


class LeaseKeeper:
    def __init__(
        self,
        renew: Callable[[str, str], bool],
        lease_seconds: float,
        why_lost: Callable[[str], str | None] | None = None,
    ) -> None:
        self._renew = renew
        self._why_lost = why_lost
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
                            "lease on task run %s lost: %s; its outcome will not be recorded",
                            key,
                            self._why(key),
                            extra={"dedupe_key": key},
                        )
                except Exception:  # a DB blip must not kill the renewer
                    log.warning("could not renew lease on %s; will retry", key, exc_info=True)

    def _why(self, dedupe_key: str) -> str:
        """``why_lost``'s answer (an ended task run), else a takeover."""
        try:
            why = self._why_lost(dedupe_key) if self._why_lost is not None else None
        except Exception:  # noqa: BLE001 - a DB blip: the warning goes out all the same
            why = None
        return why or TAKEN_OVER
