"""Runtime: what one process holds for running and triggering DAGs — settings, the loaded dags
folder, the results store, the lease keeper. Attached to the Celery app as ``app.beatflow``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from celery import Celery

from beatflow.dag.loader import DagBag, load_dags
from beatflow.dag.model import DAG
from beatflow.execution.lease import LeaseKeeper
from beatflow.settings import Settings

if TYPE_CHECKING:
    from beatflow.store import Store


class Runtime:
    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self._dagbag: DagBag | None = None
        self._store: Store | None = None
        self._leases: LeaseKeeper | None = None
        self._lock = threading.RLock()

    @property
    def dagbag(self) -> DagBag:
        with self._lock:
            if self._dagbag is None:
                self._dagbag = load_dags(self.settings.dags_folder)
            return self._dagbag

    def reload(self) -> DagBag:
        """Load the dags folder again (beat's schedule sync); returns the new bag."""
        with self._lock:
            self._dagbag = load_dags(self.settings.dags_folder)
            return self._dagbag

    def dag(self, dag_id: str) -> DAG:
        return self.dagbag.get(dag_id)

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                from beatflow.store import Store

                store = Store.from_settings(self.settings)
                store.ensure_ready()
                self._store = store
            return self._store

    @property
    def leases(self) -> LeaseKeeper:
        with self._lock:
            if self._leases is None:
                self._leases = LeaseKeeper(
                    lambda k, t: self.store.renew_lease(k, t), self.settings.lease_seconds
                )
            return self._leases


def runtime_of(app: Celery) -> Runtime:
    runtime: Runtime = app.beatflow
    return runtime
