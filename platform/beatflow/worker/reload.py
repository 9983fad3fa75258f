"""New DAGs reach a running worker: a message for a DAG task this process has not registered
(a DAG file added to the dags folder after the worker started) makes it look at the folder
once more. When the folder's version (``dag.loader.folder_version``: path, mtime and
size of every module) changed since this process last loaded it, the folder is imported again
and every DAG that is new here is added and its tasks registered; then the message runs.

Both sides of a prefork worker do this on their own: the consumer (the parent, before it hands
the message to the pool: :class:`Consumer`) and the pool process that runs it (its task
registry: :func:`install_registry`), so no pool restart is needed. A folder version is imported
at most once per process (that is the rate limit: a stream of unknown names costs one ``stat``
of the folder each).

The skew guarantee is kept: a DAG already loaded in a process is never replaced there (a task
of it runs against the version its process loaded, as at start); a changed DAG reaches a
worker when it restarts. A task whose DAG still does not load here fails with the reason
(:func:`not_loaded_reason`: the load error of its file when there is one)."""

from __future__ import annotations

import logging
import socket
import threading
import weakref
from typing import TYPE_CHECKING, Any

from celery.app.registry import TaskRegistry
from celery.app.trace import build_tracer
from celery.worker.consumer import Consumer as CeleryConsumer

from beatflow.dag.loader import DagBag, FolderVersion, check_task_names, folder_version, load_dags
from beatflow.runtime import Runtime, runtime_of

if TYPE_CHECKING:
    from celery import Celery
    from celery import Task as CeleryTask

    from beatflow.dag.model import DAG

log = logging.getLogger(__name__)

BUILTIN_PREFIXES = ("beatflow.", "celery.")
CELERY_CONSUMER = "celery.worker.consumer:Consumer"  # Celery's default worker_consumer
CONSUMER = "beatflow.worker.reload:Consumer"


class FolderReload:
    """What one process knows of its dags folder's version and the DAGs it added since."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.signature: FolderVersion | None = None
        self.last: DagBag | None = None  # the last bag imported here (its errors name why)
        self._lock = threading.Lock()

    def mark_loaded(self) -> None:
        """The folder was loaded now (at start): only a later version is imported again."""
        self.signature = folder_version(self.runtime.settings.dags_folder)

    def refresh(self) -> list[str]:
        """Import the folder again if its version changed since the last import here; add the
        DAGs new to this process and register their tasks. Returns the ids of the DAGs added."""
        with self._lock:
            folder = self.runtime.settings.dags_folder
            signature = folder_version(folder)
            if signature == self.signature:
                return []
            self.signature = signature
            app, current = self.runtime.app, self.runtime.dagbag
            bag = load_dags(folder, skip_modules=self.runtime.settings.imports)
            self.last = bag
            new = DagBag(folder=bag.folder)
            new.dags = {k: d for k, d in bag.dags.items() if k not in current.dags}
            check_task_names(new, set(app.tasks))  # a clash leaves the new DAG out, with why
            bag.errors.extend(new.errors)
            for _, dag in sorted(new.dags.items()):
                _register(app, dag)
            # a new dict, never one changed in place: another thread (the reconciler) may be
            # iterating the old one
            current.dags = {**current.dags, **new.dags}
            if new.dags:
                log.info("dags folder changed: loaded new DAGs %s", ", ".join(sorted(new.dags)))
            for err in new.errors:
                log.warning("new DAG not loaded: %s", err)
            return sorted(new.dags)

    def load_errors(self, dag_id: str) -> tuple[list[str], bool]:
        """The load errors of the last import here that may explain why ``dag_id`` is missing:
        its own (True) or, when none names it, every module that failed to import (False)."""
        bag = self.last or self.runtime.dagbag
        own = [str(e) for e in bag.errors if e.dag_id == dag_id]
        if own:
            return own, True
        return [str(e) for e in bag.errors if e.dag_id is None], False


_RELOADS: weakref.WeakKeyDictionary[Runtime, FolderReload] = weakref.WeakKeyDictionary()


def reload_of(runtime: Runtime) -> FolderReload:
    """The process's folder reload for ``runtime`` (made on first use)."""
    reload = _RELOADS.get(runtime)
    if reload is None:
        reload = _RELOADS.setdefault(runtime, FolderReload(runtime))
    return reload


def refresh_for(runtime: Runtime, name: str) -> bool:
    """A DAG task ``name`` (``<dag_id>.<task_id>``) is unknown here: import a new version of
    the folder if there is one. True if ``name`` is registered afterwards."""
    if name.startswith(BUILTIN_PREFIXES) or "." not in name:
        return False
    try:
        reload_of(runtime).refresh()
    except Exception:  # the unknown task is then failed with its reason
        log.exception("could not import the dags folder again for task %s", name)
        return False
    return dict.__contains__(runtime.app.tasks, name)


def not_loaded_reason(runtime: Runtime, dag_id: str) -> str:
    """Why ``dag_id`` is not loaded in this process, in full, for a task run's error."""
    where = f"on worker {socket.gethostname()} (queues: {', '.join(runtime.settings.queues)})"
    errors, own = reload_of(runtime).load_errors(dag_id)
    if own:
        cause = "it failed to load: " + "; ".join(errors)
    else:
        cause = "no module of the dags folder here defines it"
        if errors:
            cause += "; modules that failed to import here (one may define it): "
            cause += "; ".join(errors)
    return f'DAG "{dag_id}" is not loaded {where}: {cause}'


def _register(app: Celery, dag: DAG) -> None:
    from beatflow.worker.tasks import register_node  # tasks imports this module

    for spec in dag.tasks.values():
        task = register_node(app, dag, spec)
        if task.__trace__ is None:  # a pool process runs it through its tracer, built here
            task.__trace__ = build_tracer(
                task.name, task, app.loader, socket.gethostname(), app=app
            )


def _file_stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".py")


class _Registry(TaskRegistry):  # type: ignore[misc]
    """The app's task registry in a worker: a name it lacks is looked for in a new version of
    the dags folder before Celery's NotRegistered (``fast_trace_task`` in a pool process)."""

    runtime: Runtime

    def __missing__(self, key: str) -> CeleryTask:
        if refresh_for(self.runtime, key):
            task: CeleryTask = dict.__getitem__(self, key)
            return task
        raise self.NotRegistered(key)


def install_registry(app: Celery, runtime: Runtime) -> None:
    """Make ``app``'s task registry look for unknown DAG tasks in a new folder version."""
    registry = app._tasks
    if type(registry) is TaskRegistry:
        registry.__class__ = type("Registry", (_Registry,), {"runtime": runtime})


class _Strategies(dict[str, Any]):
    """The consumer's strategies: an unknown DAG task is looked for in a new folder version
    before the message is refused as unknown."""

    def __init__(self, consumer: CeleryConsumer) -> None:
        super().__init__()
        self.consumer = consumer

    def __missing__(self, key: str) -> Any:
        if refresh_for(runtime_of(self.consumer.app), key):
            self.consumer.update_strategies()
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)
        raise KeyError(key)


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer, with strategies that find DAG tasks added after the worker started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.strategies = _Strategies(self)
