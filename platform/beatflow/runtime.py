"""Runtime: what one process holds for running and triggering DAGs — settings (built once), the
loaded dags folder, the results store, the lease keeper. The composition root
(:func:`beatflow.app.init_app`, on beatflow's own app or a user's) builds it and attaches it to
the Celery app; everything else reaches it through :func:`runtime_of`.

At run time this module imports no other beatflow package; it names the types it holds (the
dags folder, the store) only for type checking, so it sits just above ``store`` and below every
package that uses a Runtime (worker, runs, scheduler, cli, web). How to load the DAGs, open the
store and keep leases is handed in by the root as factories (the lease keeper as the ``Leases``
protocol), so nothing imports the packages a Runtime is built from through it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from celery import Celery

    from beatflow.dag.loader import DagBag
    from beatflow.dag.model import DAG
    from beatflow.settings import Settings
    from beatflow.store import Store


class Leases(Protocol):
    """What a task run's holder asks of the process's lease keeper (the root hands in
    ``execution.lease.LeaseKeeper``): renew ``dedupe_key``'s lease while it runs."""

    def hold(self, dedupe_key: str, token: str) -> None:
        """Renew the lease of ``dedupe_key`` under ``token`` until released."""

    def writing(self, dedupe_key: str) -> None:
        """The holder is writing its outcome: a failed renewal from here on is no news."""

    def release(self, dedupe_key: str) -> None:
        """Stop renewing the lease of ``dedupe_key``."""


class Runtime:
    """Lazily built, process-wide parts; each is made once (thread-safe) on first use."""

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        *,
        load_dags: Callable[[], DagBag],
        open_store: Callable[[], Store],
        make_leases: Callable[[Runtime], Leases],
    ) -> None:
        self.app = app
        self.settings = settings
        self._load_dags = load_dags
        self._open_store = open_store
        self._make_leases = make_leases
        self._dagbag: DagBag | None = None
        self._store: Store | None = None
        self._leases: Leases | None = None
        self._lock = threading.RLock()
        # a worker sets this (worker/reload.py): a DAG not loaded here is looked for in a new
        # version of the dags folder before it is reported missing, on every path (a task's
        # message, the beat's fire, the reconciler's dispatch)
        self.find_new_dags: Callable[[], object] | None = None

    @property
    def dagbag(self) -> DagBag:
        with self._lock:
            if self._dagbag is None:
                self._dagbag = self._load_dags()
            return self._dagbag

    def reload(self) -> DagBag:
        """Load the dags folder again (beat's schedule sync); returns the new bag."""
        with self._lock:
            self._dagbag = self._load_dags()
            return self._dagbag

    def dag(self, dag_id: str) -> DAG:
        """The DAG ``dag_id`` as loaded here; DagNotFoundError if it is not (after a look for
        new DAG files, where ``find_new_dags`` is set)."""
        if self.find_new_dags is not None and dag_id not in self.dagbag.dags:
            self.find_new_dags()
        return self.dagbag.get(dag_id)

    @property
    def store(self) -> Store:
        """The results store, connected and its schema checked on first use."""
        with self._lock:
            if self._store is None:
                self._store = self._open_store()
            return self._store

    @property
    def leases(self) -> Leases:
        with self._lock:
            if self._leases is None:
                self._leases = self._make_leases(self)
            return self._leases


def attach(app: Celery, runtime: Runtime) -> None:
    """Hang ``runtime`` on ``app`` (the composition root does this once per app)."""
    app.beatflow = runtime


def runtime_of(app: Celery) -> Runtime:
    """The Runtime the composition root attached to ``app``."""
    runtime = getattr(app, "beatflow", None)
    if not isinstance(runtime, Runtime):
        raise TypeError(
            f"{app!r} has no beatflow Runtime attached; call beatflow.init_app(app) on it first"
        )
    return runtime
