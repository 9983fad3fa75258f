"""beatflow: DAGs as Python modules, run as Celery canvas, scheduled by an HA beat, recorded in a
results database with dedupe keys. ``celery -A beatflow`` finds the Celery app here;
``beatflow.init_app(app)`` adds beatflow to a Celery app of your own."""

from __future__ import annotations

from typing import Any

from beatflow.errors import BeatflowError
from beatflow.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "DAG",
    "BeatflowError",
    "ExternalRun",
    "FileSensor",
    "HttpSensor",
    "Idempotent",
    "Notifier",
    "Param",
    "PokeResult",
    "Settings",
    "Skip",
    "SqlSensor",
    "SmtpNotifier",
    "WebhookNotifier",
    "TaskGroup",
    "__version__",
    "context",
    "init_app",
    "task",
    "task_group",
    "task_value",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing beatflow must not build the Celery app or read the environment.
    # `celery -A beatflow` looks up `beatflow.app` (the submodule here) and then `beatflow.celery`.
    if name == "celery":
        from beatflow.app import get_app

        return get_app()
    if name == "init_app":  # add beatflow to an existing Celery app
        from beatflow.app import init_app

        return init_app
    if name in ("task", "Skip"):  # task.branch, task.short_circuit, raise Skip("why")
        from beatflow.dag import flow

        return getattr(flow, name)
    if name in ("FileSensor", "SqlSensor", "HttpSensor", "ExternalRun", "PokeResult"):
        from beatflow import sensors  # built-in sensors, and what a poke may return

        return getattr(sensors, name)
    if name in ("DAG", "context", "Param"):
        from beatflow.dag import authoring

        return getattr(authoring, name)
    if name in ("Notifier", "WebhookNotifier", "SmtpNotifier"):  # on_*_callback=Notifier(...)
        from beatflow import notify

        return getattr(notify, name)
    if name == "task_value":  # a DAG task's value from its AsyncResult or Celery task id
        from beatflow.runs.task_value import task_value

        return task_value
    if name in ("TaskGroup", "task_group"):
        from beatflow.dag import groups

        return getattr(groups, name)
    if name == "Idempotent":  # base class for plain Celery tasks with a durable dedupe key
        from beatflow.plain import Idempotent

        return Idempotent
    raise AttributeError(f"module 'beatflow' has no attribute {name!r}")
