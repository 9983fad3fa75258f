"""The beat's view of the dags folder: re-imported in a thread of its own whenever a file changes,
so a DAG module whose import hangs can never hang the tick loop (the loop keeps the last good
DAGs and logs the hung import); at most one import runs at a time."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from beatflow.dag.loader import DagBag, FolderVersion, folder_version, load_dags

log = logging.getLogger(__name__)

Signature = FolderVersion


def folder_signature(folder: Path) -> Signature:
    """(path, mtime, size) of every DAG module: the folder is re-imported only when it changes."""
    return folder_version(folder)


class FolderLoader:
    """``poll()`` starts an import when the folder changed and returns a new bag once one is
    done (None meanwhile); ``bag`` is the last good one."""

    def __init__(
        self, folder: Path, *, hung_after: float, skip_modules: tuple[str, ...] = ()
    ) -> None:
        self.folder = folder
        self.skip_modules = skip_modules  # BEATFLOW_IMPORTS: plain task modules, not DAGs
        self.hung_after = hung_after
        self.bag: DagBag | None = None
        self._signature: Signature | None = None
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._result: tuple[Signature, DagBag | BaseException] | None = None
        self._warned = False

    def poll(self) -> DagBag | None:
        if self._thread is not None:
            if self._thread.is_alive():
                waited = time.monotonic() - self._started
                if waited > self.hung_after and not self._warned:
                    self._warned = True
                    log.error(
                        "beat: importing the dags folder has not finished after %.0fs (a module "
                        "hangs at import?); the beat keeps firing the DAGs it had",
                        waited,
                    )
                return None
            self._thread = None
            return self._take()
        signature = folder_signature(self.folder)
        if signature == self._signature:
            return None
        self._start(signature)
        return None

    def wait(self, timeout: float) -> DagBag | None:
        """Start an import if needed and wait up to ``timeout`` for it (the first load)."""
        self.poll()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.poll()

    def _start(self, signature: Signature) -> None:
        self._started = time.monotonic()
        self._warned = False

        def run() -> None:
            try:
                bag = load_dags(self.folder, skip_modules=self.skip_modules)
                self._result = (signature, bag)
            except BaseException as exc:  # noqa: BLE001 - reported by the loop
                self._result = (signature, exc)

        self._thread = threading.Thread(target=run, name="beatflow-beat-dags", daemon=True)
        self._thread.start()

    def _take(self) -> DagBag | None:
        result, self._result = self._result, None
        if result is None:
            return None
        signature, value = result
        self._signature = signature  # a failed import is not retried until a file changes
        if isinstance(value, BaseException):
            log.error("beat: loading the dags folder failed: %r; keeping the last good DAGs", value)
            return None
        self.bag = value
        return value
