"""The composition root. ``create_app(settings)`` builds one Celery app from Settings (built once,
here), attaches the process's :class:`~beatflow.runtime.Runtime` and registers every task:
beatflow's own and, when asked, every loaded DAG's as ``<dag_id>.<task_id>``. ``get_app()`` is
the process-wide app ``celery -A beatflow`` uses."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, signals

from beatflow import plain
from beatflow.celery_passthrough import install_config_masking
from beatflow.dag.loader import load_dags as load_dags_folder
from beatflow.execution.canvas import counting_backend
from beatflow.execution.lease import LeaseKeeper
from beatflow.execution.send import BatchingCelery, BatchingEvents
from beatflow.logs import configure_logging
from beatflow.observability.flower import configure_if_flower
from beatflow.runs import fire, reconciler
from beatflow.runtime import Runtime, attach, runtime_of
from beatflow.settings import Settings, mask_url
from beatflow.store import Store
from beatflow.worker.log_capture import install_log_capture
from beatflow.worker.tasks import install

log = logging.getLogger(__name__)

_lock = threading.Lock()
_app: Celery | None = None


def _open_store(settings: Settings) -> Store:
    store = Store.from_settings(settings)
    store.ensure_ready()
    return store


def _make_leases(runtime: Runtime) -> LeaseKeeper:
    return LeaseKeeper(lambda k, t: runtime.store.renew_lease(k, t), runtime.settings.lease_seconds)


def create_app(settings: Settings | None = None, *, load_dags: bool = True) -> Celery:
    """Build a Celery app for ``settings`` (from the environment when omitted).

    With ``load_dags`` the dags folder is loaded now (once per process: a worker imports it
    before forking its pool), and every task of every DAG that loads becomes a Celery task named
    ``<dag_id>.<task_id>``; without it the DAGs load on first use (the CLI).
    """
    settings = settings or Settings.from_env()
    # a block of sends goes to the broker in one round trip, their task-sent events in one
    # message (execution.send)
    app = BatchingCelery("beatflow", set_as_current=False, events=BatchingEvents)
    app.conf.update(settings.celery_config())
    install_config_masking(mask_url)  # `inspect conf`, Flower: every URL's password masked
    app.backend_cls = counting_backend(app.conf.result_backend)  # chords count parts only
    runtime = Runtime(
        app,
        settings,
        load_dags=lambda: load_dags_folder(settings.dags_folder, skip_modules=settings.imports),
        open_store=lambda: _open_store(settings),
        make_leases=_make_leases,
    )
    attach(app, runtime)
    install(app, runtime, load_dags=load_dags)  # the worker's tasks, beatflow.finish_run among them
    install_log_capture(runtime)  # task logs into the results DB, in worker processes
    fire.register(app)
    reconciler.register(app)  # a worker runs the reconciler's thread (HA by a Redis lease)
    plain.install(app, settings, import_now=load_dags)  # BEATFLOW_IMPORTS: plain Celery tasks
    return app


def get_app() -> Celery:
    """The process-wide app, built on first use from the environment."""
    global _app
    with _lock:
        if _app is None:
            _app = create_app()
            _app.set_current()
            _app.set_default()
            configure_if_flower(runtime_of(_app).settings)  # `celery -A beatflow flower`: auth on
        return _app


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _setup_logging(**_: Any) -> None:
    # Connecting this signal stops Celery from installing its own root handler.
    settings = runtime_of(_app).settings if _app is not None else Settings.from_env()
    configure_logging(settings)
