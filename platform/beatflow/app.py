"""The composition root. ``init_app(app)`` adds beatflow to a Celery app: it attaches the
process's :class:`~beatflow.runtime.Runtime` (settings built once, here), sets the Celery
settings beatflow needs, refuses those it cannot run with, registers every task (beatflow's own
and, when asked, every loaded DAG's as ``<dag_id>.<task_id>``) and hooks its signals.
``create_app(settings)`` is ``init_app`` on a new app of beatflow's own; ``get_app()`` is the
process-wide one ``celery -A beatflow`` uses."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from celery import Celery, signals
from celery.app.defaults import DEFAULTS

from beatflow import plain
from beatflow.celery_passthrough import REFUSED, install_config_masking
from beatflow.dag.loader import load_dags as load_dags_folder
from beatflow.errors import AppConfigError, SettingsError
from beatflow.execution.canvas import counting_backend
from beatflow.execution.lease import LeaseKeeper, ended_meanwhile
from beatflow.execution.send import BatchingCelery, BatchingEvents
from beatflow.logs import configure_logging
from beatflow.notify import deliver
from beatflow.observability.flower import configure_if_flower
from beatflow.runs import fire, reconciler
from beatflow.runtime import Runtime, attach
from beatflow.settings import Settings, mask_url
from beatflow.store import Store
from beatflow.worker.log_capture import install_log_capture
from beatflow.worker.tasks import install

log = logging.getLogger(__name__)

_lock = threading.Lock()
_app: Celery | None = None
_batching_classes: dict[type[Celery], type[Celery]] = {}
_settings: Settings | None = None  # the last app's, for Celery's setup_logging signal

# The Celery settings beatflow's guarantees rest on (celery_passthrough.REFUSED says why each):
# an app that set one to another value is refused; the app's own `imports` are kept and
# BEATFLOW_IMPORTS added to them. Every other setting beatflow uses is a default: the app's
# own value, where it set one, stays.
_MUST_AGREE: dict[str, str] = {
    **{name: why for name, why in REFUSED.items() if name not in ("imports", "include")},
    "task_default_queue": (
        "the beat sends its fire tasks to beatflow's default queue: set BEATFLOW_DEFAULT_QUEUE "
        "to the app's default queue"
    ),
}
# settings whose value is a dict: the app's keys are kept beside beatflow's, which must agree
_MERGED = ("broker_transport_options", "result_backend_transport_options")
_JSON_TYPES = {"json", "application/json"}


def _open_store(settings: Settings) -> Store:
    store = Store.from_settings(settings)
    store.ensure_ready()
    return store


def _make_leases(runtime: Runtime) -> LeaseKeeper:
    return LeaseKeeper(
        lambda k, t: runtime.store.renew_lease(k, t),
        runtime.settings.lease_seconds,
        why_lost=lambda k: ended_meanwhile(runtime.store.get_task_run(k)),
    )


def init_app(
    app: Celery,
    settings: Settings | None = None,
    *,
    load_dags: bool = True,
    **overrides: Any,
) -> Celery:
    """Add beatflow to ``app``, an existing Celery app, and return it.

    beatflow's settings come from ``settings`` (the BEATFLOW_* environment when omitted) with
    ``overrides`` (Settings fields, e.g. ``broker_url=...``) applied. The Celery settings
    beatflow relies on (JSON only, late acks, its broker, result backend and beat scheduler,
    UTC, ...) must be unset on ``app`` or already agree; every one that does not is reported in
    one :class:`~beatflow.errors.AppConfigError`, and nothing is changed. The app's other
    settings (routes, rate limits, queues), its tasks and its signal handlers stay as they are.

    With ``load_dags`` the dags folder is loaded now (once per process: a worker imports it
    before forking its pool), and every task of every DAG that loads becomes a Celery task named
    ``<dag_id>.<task_id>``; without it the DAGs load on first use (the CLI).
    """
    if isinstance(getattr(app, "beatflow", None), Runtime):
        raise AppConfigError(app.main or "", ["it has beatflow already (init_app ran on it)"])
    settings = _with_overrides(settings or Settings.from_env(), overrides)
    config = _merge_config(app, settings.celery_config(), settings)
    app.conf.update(config)
    _install_batching(app)
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
    deliver.register(app)  # beatflow.notify: a notifier's event sent off the task's path
    reconciler.register(app)  # a worker runs the reconciler's thread (HA by a Redis lease)
    plain.install(app, settings, import_now=load_dags)  # BEATFLOW_IMPORTS: plain Celery tasks
    configure_if_flower(settings)  # `celery -A beatflow|proj flower`: auth on, memory bounded
    global _settings
    _settings = settings
    return app


def create_app(settings: Settings | None = None, *, load_dags: bool = True) -> Celery:
    """A new Celery app of beatflow's own: :func:`init_app` on ``Celery("beatflow")``."""
    return init_app(Celery("beatflow", set_as_current=False), settings, load_dags=load_dags)


def get_app() -> Celery:
    """The process-wide app, built on first use from the environment."""
    global _app
    with _lock:
        if _app is None:
            _app = create_app()
            _app.set_current()
            _app.set_default()
        return _app


def _with_overrides(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    if not overrides:
        return settings
    try:
        return settings.replace(**overrides)
    except TypeError:
        known = set(Settings.model_fields)
        unknown = sorted(set(overrides) - known)
        raise SettingsError(
            [f"init_app({name}=...): no such beatflow setting" for name in unknown]
        ) from None


def _app_sets(app: Celery) -> set[str]:
    """The settings ``app`` set: those whose value is not Celery's default, and those its
    ``config_from_object`` source names (set to the default, they still say what it wants)."""
    conf = app.conf  # loads a pending config_from_object
    named = {k for k, v in conf.items() if k in DEFAULTS and v != DEFAULTS[k]}
    source = getattr(app, "_config_source", None)
    if source is not None and not isinstance(source, str):
        named |= {k for k in dir(source) if k in DEFAULTS}
    elif isinstance(source, str):
        try:
            from celery.utils.imports import symbol_by_name

            named |= {k for k in dir(symbol_by_name(source)) if k in DEFAULTS}
        except Exception:  # the app's own import error is Celery's to report
            log.debug("could not read the config source %s", source, exc_info=True)
    return named


def _agrees(name: str, theirs: Any, ours: Any, settings: Settings) -> bool:
    if name in ("accept_content", "result_accept_content"):
        return theirs is None or (bool(theirs) and set(theirs) <= _JSON_TYPES)
    if name in ("task_serializer", "result_serializer", "event_serializer"):
        return theirs in _JSON_TYPES
    if name == "broker_url":
        return theirs in (ours, settings.broker_url)
    if name == "result_backend":
        return theirs in (ours, settings.effective_result_backend_url)
    if name in _MERGED:
        return not _clashing_keys(theirs, ours)
    return bool(theirs == ours)


def _clashing_keys(theirs: Mapping[str, Any] | None, ours: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(theirs or {}) & set(ours) if (theirs or {})[k] != ours[k])


def _problem(name: str, theirs: Any, ours: Any, why: str) -> str:
    if name in _MERGED:  # their values may hold a Sentinel password: name the keys only
        keys = ", ".join(_clashing_keys(theirs, ours))
        return f"{name}: {keys} set otherwise than beatflow needs: {why}"
    return f"{name}={_shown(theirs)} (beatflow needs {_shown(ours)}): {why}"


def _shown(value: Any) -> str:
    return mask_url(value) if isinstance(value, str) and "://" in value else repr(value)


def _merge_config(app: Celery, config: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """What ``app.conf`` takes from beatflow's ``config``; AppConfigError lists every setting of
    the app that disagrees with one beatflow needs."""
    app_sets = _app_sets(app)
    problems = []
    for name, why in _MUST_AGREE.items():
        if name not in app_sets:
            continue
        theirs, ours = app.conf[name], config.get(name, DEFAULTS.get(name))  # unset: Celery's
        if not _agrees(name, theirs, ours, settings):
            problems.append(_problem(name, theirs, ours, why))
    if problems:
        raise AppConfigError(app.main or "", problems)
    out: dict[str, Any] = {}
    for name, value in config.items():
        if name in _MERGED and name in app_sets:
            out[name] = {**(app.conf[name] or {}), **value}
        elif name in _MUST_AGREE or name not in app_sets:
            out[name] = value
    if _declares_quorum(app, app_sets) and "task_queue_max_priority" not in app_sets:
        # the app's own quorum queues: RabbitMQ refuses x-max-priority on them
        out["task_queue_max_priority"] = None
    return out


def _declares_quorum(app: Celery, app_sets: set[str]) -> bool:
    names = ("task_default_queue_type", "task_create_missing_queue_type")
    return any(n in app_sets and app.conf[n] == "quorum" for n in names)


def _install_batching(app: Celery) -> None:
    """Blocks of sends in one round trip (execution.send) on ``app``, whatever its class: the
    app becomes an instance of its class with BatchingCelery mixed in, its event dispatcher
    BatchingEvents'."""
    if not isinstance(app, BatchingCelery):
        app.__class__ = _batching_class(type(app))
    if app.events_cls != Celery.events_cls:  # the app's own Events: its events go one by one
        log.warning("app %s has its own events class: task-sent events are sent one by one", app)
        return
    app.events_cls = BatchingEvents
    app.__dict__.pop("events", None)  # built before: built again, with BatchingEvents
    if "amqp" in app.__dict__:
        app.amqp.__dict__.pop("_event_dispatcher", None)


def _batching_class(cls: type[Celery]) -> type[Celery]:
    """``cls`` with BatchingCelery mixed in (one class per ``cls``)."""
    if cls is Celery:
        return BatchingCelery
    with _lock:
        if cls not in _batching_classes:
            name = f"Batching{cls.__name__}"
            _batching_classes[cls] = type(
                name, (BatchingCelery, cls), {"__module__": cls.__module__}
            )
        return _batching_classes[cls]


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _setup_logging(**_: Any) -> None:
    # Connecting this signal stops Celery from installing its own root handler.
    configure_logging(_settings if _settings is not None else Settings.from_env())
