"""create_app(settings) -> Celery, and get_app() for `celery -A beatflow`: one app per process,
configured from Settings, that registers every loaded DAG's tasks as `<dag_id>.<task_id>`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, signals

from beatflow.logs import configure_logging
from beatflow.settings import Settings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_app: Celery | None = None


def create_app(settings: Settings | None = None, *, load_dags: bool = True) -> Celery:
    """Build a Celery app for ``settings`` (from the environment when omitted).

    With ``load_dags`` the dags folder is loaded now (once per process: a worker imports it
    before forking its pool), and every task of every DAG that loads becomes a Celery task named
    ``<dag_id>.<task_id>``; without it the DAGs load on first use (the CLI).
    """
    settings = settings or Settings.from_env()
    app = Celery("beatflow", set_as_current=False)
    app.conf.update(settings.celery_config())
    app.beatflow_settings = settings
    from beatflow.execution.tasks import install

    install(app, settings, load_dags=load_dags)
    return app


def get_app() -> Celery:
    """The process-wide app, built on first use from the environment."""
    global _app
    with _lock:
        if _app is None:
            _app = create_app()
            _app.set_current()
            _app.set_default()
            from beatflow.observability.flower import configure_if_flower

            configure_if_flower(settings_of(_app))  # `celery -A beatflow flower`: auth on
        return _app


def settings_of(app: Celery) -> Settings:
    settings: Settings = app.beatflow_settings
    return settings


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _setup_logging(**_: Any) -> None:
    # Connecting this signal stops Celery from installing its own root handler.
    settings = _app.beatflow_settings if _app is not None else Settings.from_env()
    configure_logging(settings)
