"""The worker's tasks: one per DAG task (``<dag_id>.<task_id>``), plus ``beatflow.segment``
(expand a big part of a plan on a worker), ``beatflow.map_chunk`` (expand a slice of a wide
mapping) and ``beatflow.finish_run`` (close a run: ``worker/closing.py``). The composition root
(:mod:`beatflow.app`) calls :func:`install`; the tasks of ``runs/`` (firing) are registered
there too."""

from __future__ import annotations

import logging
import re
from typing import Any

from celery import Celery, signals
from celery import Task as CeleryTask
from celery.canvas import Signature

from beatflow.dag.compile import (
    MAP_CHUNK_TASK,
    SEGMENT_TASK,
    compile_node,
    map_signatures,
    plan_for,
    task_name,
)
from beatflow.dag.loader import DagBag
from beatflow.dag.model import DAG, TaskSpec
from beatflow.dag.plan import at_path
from beatflow.errors import BeatflowError
from beatflow.execution.options import TASK_OPTIONS
from beatflow.runtime import Runtime, runtime_of
from beatflow.worker import closing, node, reload, skew

log = logging.getLogger(__name__)


def install(app: Celery, runtime: Runtime, *, load_dags: bool = True) -> None:
    """Register the worker's tasks on ``app`` (and the DAGs' when asked)."""
    _register_builtin(app)
    closing.register(app)
    # a DAG task this worker has not registered (a DAG file added since it started) is looked
    # for in a new version of the dags folder, by the consumer and by the pool process that
    # runs it (worker/reload.py), before it is failed as deploy skew
    # (an app of the project's own with a consumer of its own keeps it: new DAGs then need a
    # worker restart there)
    if app.conf.worker_consumer in (None, reload.CELERY_CONSUMER):
        app.conf.worker_consumer = reload.CONSUMER
    if load_dags:
        reload.reload_of(runtime).mark_loaded()  # before the load: a file added meanwhile counts
        runtime.find_new_dags = reload.reload_of(runtime).refresh  # fires, the reconciler too
        register_dag_tasks(app, runtime.dagbag)
        reload.install_registry(app, runtime)

        @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
        def _say_what_loaded(sender: Any = None, **_: Any) -> None:
            if getattr(sender, "app", None) is app:
                log_loaded(runtime.dagbag)

    @signals.task_unknown.connect(weak=False)  # type: ignore[untyped-decorator]
    def _unknown(name: str = "", message: Any = None, **_: Any) -> None:
        # a message for a DAG task this worker does not have (deploy skew): Celery drops it;
        # fail its task run so the DAG run still ends
        try:
            args, kwargs, _embed = message.decode() if message is not None else ((), {}, {})
            skew.fail_unknown_task(runtime, name, args, kwargs)
        except Exception:  # never break the consumer over a bad message
            log.exception("could not record the unknown task %s as failed", name)

    @signals.worker_process_init.connect(weak=False)  # type: ignore[untyped-decorator]
    def _warm_up(**_: Any) -> None:
        # Connect each pool process to the results DB (and check its schema) before its first
        # task, so the first task run does not pay for it; a DB that is down now is retried then.
        try:
            runtime.store  # noqa: B018 - connects and checks the schema
        except BeatflowError as exc:
            log.warning("results database not reachable at worker start: %s", exc)


def log_loaded(bag: DagBag) -> None:
    """The worker's start-up line: how many DAGs it runs and from which folder, and a warning
    for each module that does not load (a worker started elsewhere than its dags/ runs none)."""
    log.info("worker: %d DAGs loaded from %s in %.2fs", len(bag.dags), bag.folder, bag.seconds)
    for err in bag.errors:
        log.warning("worker: a DAG module does not load, its tasks fail here: %s", err)


def register_dag_tasks(app: Celery, bag: DagBag) -> None:
    for dag in bag.dags.values():
        for spec in dag.tasks.values():
            register_node(app, dag, spec)


def register_node(app: Celery, dag: DAG, spec: TaskSpec) -> CeleryTask:
    name = task_name(dag.dag_id, spec.task_id)
    dag_id, task_id = dag.dag_id, spec.task_id

    def body(
        self: CeleryTask,
        run_id: str,
        map_index: int | None = None,
        closes: bool = False,
        poke: int | None = None,  # a sensor's next poke: read from the request (worker/sensor)
    ) -> dict[str, Any] | None:
        # the DAG is looked up inside the wrapper: deploy skew fails the task run, never raises
        runtime = runtime_of(self.app)
        return node.run_node(runtime, self, dag_id, task_id, run_id, map_index, closes=closes)

    options: dict[str, Any] = {"name": name, **TASK_OPTIONS}
    if spec.soft_time_limit is not None:
        options["soft_time_limit"] = spec.soft_time_limit
    if spec.time_limit is not None:
        options["time_limit"] = spec.time_limit
    # Celery compiles a signature check named after the function: an identifier (a task
    # group's dotted id, extract.load, is not one); the task's name stays the full id
    body.__name__ = re.sub(r"\W", "_", spec.task_id)
    body.__qualname__ = name
    body.__module__ = f"beatflow_dags.{dag_id}"
    registered: CeleryTask = app.task(**options)(body)
    return registered


def _register_builtin(app: Celery) -> None:
    @app.task(name=SEGMENT_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def segment(self: CeleryTask, dag_id: str, run_id: str, path: str) -> None:
        runtime = runtime_of(self.app)

        def build() -> Signature:
            dag = runtime.dag(dag_id)
            return compile_node(self.app, dag, run_id, at_path(plan_for(dag).root, path), path)

        def not_run() -> list[tuple[str, int]]:
            return [(t, -1) for t in runtime.dag(dag_id).tasks]

        skew.expand_or_fail(runtime, self, dag_id, run_id, f"segment {path!r}", build, not_run)

    @app.task(name=MAP_CHUNK_TASK, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
    def map_chunk(
        self: CeleryTask, dag_id: str, task_id: str, run_id: str, start: int, end: int
    ) -> None:
        runtime = runtime_of(self.app)
        skew.expand_or_fail(
            runtime,
            self,
            dag_id,
            run_id,
            f"map instances {start}..{end - 1} of task {task_id!r}",
            lambda: map_signatures(self.app, runtime.dag(dag_id), task_id, run_id, start, end),
            lambda: [(task_id, i) for i in range(start, end)],
            plain=True,
        )
