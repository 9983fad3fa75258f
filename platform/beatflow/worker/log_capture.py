"""Task logs into the results DB: a logging handler, installed in worker processes, that keeps
what each task run logs (the lines carrying its correlation ids), per try, capped at
BEATFLOW_TASK_LOG_MAX_BYTES per try. Lines go through a bounded queue to a writer thread that
inserts them in batches: a task never waits for, nor fails because of, log storage (a full queue
or a database error drops lines and counts them)."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from celery import signals

from beatflow.logs import current_correlation
from beatflow.runtime import Runtime
from beatflow.store.task_logs import TaskLogBatch

log = logging.getLogger(__name__)

LINE_MAX = 8192  # characters of one message kept
QUEUE_MAX = 10_000
FLUSH_SECONDS = 0.5
FLUSH_LINES = 500
_TRACKED_TRIES = 2000  # per-try byte counters kept (oldest forgotten first)

Key = tuple[str, str, str, int, int]  # dag_id, run_id, task_id, map_index, try_number


class TaskLogCapture(logging.Handler):
    """Captures records emitted inside a task run's try (``dedupe_key`` and ``try_number`` in
    the correlation ids) and writes them with ``write`` from its own thread."""

    def __init__(
        self,
        write: Callable[[Sequence[TaskLogBatch]], None],
        max_bytes: int,
        *,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        super().__init__(logging.DEBUG)
        self.write = write
        self.max_bytes = max_bytes
        self.flush_seconds = flush_seconds
        self.dropped = 0
        self._pid = -1
        self._queue: queue.Queue[tuple[Key, dict[str, Any]] | None] = queue.Queue(QUEUE_MAX)
        self._sizes: OrderedDict[Key, int] = OrderedDict()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    # ------------------------------------------------------------------ the task's side

    def emit(self, record: logging.LogRecord) -> None:
        try:
            ids = current_correlation()
            if "dedupe_key" not in ids or "try_number" not in ids or "run_id" not in ids:
                return
            self._ensure_thread()
            key: Key = (
                str(ids["dag_id"]),
                str(ids["run_id"]),
                str(ids["task_id"]),
                int(ids.get("map_index", -1)),
                int(ids["try_number"]),
            )
            line = self._line(record)
            if not self._account(key, line):
                return
            self._queue.put_nowait((key, line))
        except queue.Full:
            self.dropped += 1
        except Exception:  # noqa: BLE001 - logging must never break the task
            self.dropped += 1

    def _line(self, record: logging.LogRecord) -> dict[str, Any]:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the caller's bug, not ours
            message = str(record.msg)
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message[:LINE_MAX],
        }
        if record.exc_info and record.exc_info[0] is not None:
            formatter = self.formatter or logging.Formatter()
            line["exc_info"] = formatter.formatException(record.exc_info)[:LINE_MAX]
        return line

    def _account(self, key: Key, line: dict[str, Any]) -> bool:
        """Charge the line to its try; past the cap keep one marker line, then nothing."""
        size = sum(len(str(v)) for v in line.values()) + 40
        with self._start_lock:
            used = self._sizes.pop(key, 0)
            self._sizes[key] = used + size
            while len(self._sizes) > _TRACKED_TRIES:
                self._sizes.popitem(last=False)
        if self.max_bytes <= 0:
            return False
        if used + size <= self.max_bytes:
            return True
        if used <= self.max_bytes:  # the first line over the cap: say so, once
            line.clear()
            line.update(
                ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
                level="warning",
                logger="beatflow.logs",
                message=f"log of this try truncated at {self.max_bytes} bytes "
                "(BEATFLOW_TASK_LOG_MAX_BYTES)",
            )
            with self._start_lock:
                self._sizes[key] = self.max_bytes + 1
            return True
        return False

    def flush_soon(self) -> None:
        """Ask the writer to write what it holds now (a task ended); does not wait."""
        self._wake.set()

    # ------------------------------------------------------------------ the writer

    def _ensure_thread(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._start_lock:
            if self._pid == pid:
                return
            # a new process (forked pool child): the parent's thread and queue are not ours
            self._queue = queue.Queue(QUEUE_MAX)
            self._sizes = OrderedDict()
            self._wake = threading.Event()
            self._thread = threading.Thread(
                target=self._run, name="beatflow-task-logs", daemon=True
            )
            self._pid = pid
            self._thread.start()

    def _run(self) -> None:
        pending: list[tuple[Key, dict[str, Any]]] = []
        last = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=self.flush_seconds / 2)
                if item is None:
                    self._write(pending)
                    return
                pending.append(item)
            except queue.Empty:
                pass
            due = time.monotonic() - last >= self.flush_seconds or self._wake.is_set()
            if pending and (due or len(pending) >= FLUSH_LINES):
                self._wake.clear()
                self._write(pending)
                pending = []
                last = time.monotonic()

    def _write(self, pending: list[tuple[Key, dict[str, Any]]]) -> None:
        if not pending:
            return
        grouped: dict[Key, list[dict[str, Any]]] = {}
        for key, line in pending:
            grouped.setdefault(key, []).append(line)
        batches = [
            TaskLogBatch(
                dag_id=k[0], run_id=k[1], task_id=k[2], map_index=k[3], try_number=k[4], lines=lines
            )
            for k, lines in grouped.items()
        ]
        try:
            self.write(batches)
        except Exception as exc:  # noqa: BLE001 - dropped lines are counted, never raised
            self.dropped += len(pending)
            log.warning("could not store %d task log lines: %s", len(pending), exc)

    def close(self) -> None:
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            try:
                self._queue.put(None, timeout=1.0)
                self._thread.join(timeout=5.0)
            except queue.Full:
                pass
        super().close()


def install_log_capture(runtime: Runtime) -> None:
    """Capture task logs in this app's worker processes (prefork children and solo/thread
    pools alike); a no-op with BEATFLOW_TASK_LOG_MAX_BYTES=0."""
    if runtime.settings.task_log_max_bytes <= 0:
        return

    def start(**_: Any) -> None:
        root = logging.getLogger()
        if any(isinstance(h, TaskLogCapture) for h in root.handlers):
            return
        handler = TaskLogCapture(
            lambda batches: runtime.store.add_task_logs(batches),
            runtime.settings.task_log_max_bytes,
        )
        root.addHandler(handler)

    def stop(**_: Any) -> None:
        # a pool process ends without running atexit: write what it holds first
        for h in logging.getLogger().handlers:
            if isinstance(h, TaskLogCapture):
                h.close()

    # No flush at each task's end: that made the writer insert once per task run (a
    # transaction per task run, as many as the task's own). Lines are written in batches at
    # most FLUSH_SECONDS after they were logged, and when the process stops.
    signals.worker_process_init.connect(start, weak=False)
    signals.worker_ready.connect(start, weak=False)
    signals.worker_process_shutdown.connect(stop, weak=False)
    signals.worker_shutdown.connect(stop, weak=False)
