"""Runtime: what one process holds for running and triggering DAGs — settings (built once), the
loaded dags folder, the results store, the lease keeper. The composition root
(:func:`beatflow.app.create_app`) builds it and attaches it to the Celery app; everything else
reaches it through :func:`runtime_of`.

This module sits at the bottom of the package: it imports no other beatflow package at run time.
How to load the DAGs, open the store and keep leases is handed in by the root as factories, so
the packages that use a Runtime (execution, runs, scheduler, cli) never import the packages it
is built from through it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery

    from beatflow.dag.loader import DagBag
    from beatflow.dag.model import DAG
    from beatflow.execution.lease import LeaseKeeper
    from beatflow.settings import Settings
    from beatflow.store import Store


class Runtime:
    """Lazily built, process-wide parts; each is made once (thread-safe) on first use."""

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        *,
        load_dags: Callable[[], DagBag],
        open_store: Callable[[], Store],
        make_leases: Callable[[Runtime], LeaseKeeper],
        close_run: Callable[..., str] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self._load_dags = load_dags
        self._open_store = open_store
        self._make_leases = make_leases
        self._close_run = close_run
        self._dagbag: DagBag | None = None
        self._store: Store | None = None
        self._leases: LeaseKeeper | None = None
        self._lock = threading.RLock()

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
        return self.dagbag.get(dag_id)

    @property
    def store(self) -> Store:
        """The results store, connected and its schema checked on first use."""
        with self._lock:
            if self._store is None:
                self._store = self._open_store()
            return self._store

    @property
    def leases(self) -> LeaseKeeper:
        with self._lock:
            if self._leases is None:
                self._leases = self._make_leases(self)
            return self._leases

    def close_run(self, dag_id: str, run_id: str, **known: Any) -> str:
        """Close a DAG run whose last task just ended (the root hands in runs.lifecycle's
        close_run): the node wrapper of a run's closing task calls it in process instead of a
        separate ``beatflow.finish_run`` hop. ``known``: close_run's ``tasks`` and
        ``on_closed``. Returns the run's state."""
        if self._close_run is None:
            raise RuntimeError("this Runtime was built without close_run")
        return self._close_run(self, dag_id, run_id, **known)


def attach(app: Celery, runtime: Runtime) -> None:
    """Hang ``runtime`` on ``app`` (the composition root does this once per app)."""
    app.beatflow = runtime


def runtime_of(app: Celery) -> Runtime:
    """The Runtime the composition root attached to ``app``."""
    runtime = getattr(app, "beatflow", None)
    if not isinstance(runtime, Runtime):
        raise TypeError(f"{app!r} was not built by beatflow.app.create_app (no Runtime attached)")
    return runtime
