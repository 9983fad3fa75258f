"""Plan -> Celery canvas: Series -> chain, Parallel -> group (a group followed by work becomes a
chord). The only module of the DAG layer that imports Celery. Messages carry ids only: every
signature is immutable with args ``(run_id,)`` (plus a map index); a subtree larger than
``inline_limit`` tasks is sent as a ``beatflow.segment`` task that expands itself on a worker,
so no message embeds more than a bounded slice of the DAG.

A run ends with ``beatflow.finish_run``, which closes it, unless its plan ends in one plain task
(a chain's last task, a fan-in's sink; not a ``.map()``): that task's signature carries
``closes=True`` and its node wrapper closes the run in process, which saves a Celery hop per DAG
run (``closing_task``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from celery import Celery, chain, chord, group
from celery.canvas import Signature, _chain

from beatflow.dag.model import DAG
from beatflow.dag.plan import Leaf, Node, Parallel, Plan, Series, build_plan, size

SEGMENT_TASK = "beatflow.segment"
FINISH_TASK = "beatflow.finish_run"
MAP_CHUNK_TASK = "beatflow.map_chunk"
FANOUT = 64  # members per canvas level (chains and groups wider than this are nested)
INLINE_LIMIT = 64  # tasks a subtree may hold and still be embedded in its parent's messages


def task_name(dag_id: str, task_id: str) -> str:
    """The Celery task name of a DAG task, as Flower shows it."""
    return f"{dag_id}.{task_id}"


def plan_for(dag: DAG) -> Plan:
    """The plan of ``dag``, built once per DAG object (workers compile many runs of it)."""
    if dag.plan_cache is None:
        dag.plan_cache = build_plan(dag, fanout=FANOUT)
    plan: Plan = dag.plan_cache
    return plan


def compile_problems(dags: Iterable[DAG]) -> list[str]:
    """Build every DAG's plan and canvas (nothing is sent); one message per DAG that cannot
    compile, so `beatflow dags check` fails on it instead of its first run."""
    app = Celery("beatflow-check", set_as_current=False)
    problems = []
    for dag in dags:
        try:
            compile_run(app, dag, "check")
        except Exception as exc:  # noqa: BLE001 - report every DAG, whatever broke
            where = f" ({dag.file}:{dag.line})" if dag.file else ""
            problems.append(f'DAG "{dag.dag_id}"{where} does not compile: {exc}')
    return problems


def closing_task(dag: DAG) -> str | None:
    """The task that closes its run in process: the one plain (not mapped) task the plan ends
    with, after every other task; None when the plan ends in parallel work or a ``.map()``."""
    node = plan_for(dag).root
    while isinstance(node, Series):
        node = node.children[-1]
    if isinstance(node, Leaf) and dag.tasks[node.task_id].map_over is None:
        return node.task_id
    return None


def task_signature(
    app: Celery, dag: DAG, task_id: str, run_id: str, map_index: int | None = None
) -> Signature:
    spec = dag.tasks[task_id]
    options: dict[str, Any] = {}
    if spec.queue:
        options["queue"] = spec.queue
    if spec.priority is not None:
        options["priority"] = spec.priority
    kwargs: dict[str, Any] = {} if map_index is None else {"map_index": map_index}
    if map_index is None and task_id == closing_task(dag):
        kwargs["closes"] = True
    return app.signature(
        task_name(dag.dag_id, task_id), args=(run_id,), kwargs=kwargs, immutable=True, **options
    )


def compile_node(
    app: Celery, dag: DAG, run_id: str, node: Node, path: str, *, inline_limit: int = INLINE_LIMIT
) -> Signature:
    """Canvas for ``node`` (at ``path`` in the plan). A node of at most ``inline_limit`` tasks is
    compiled whole; a bigger one becomes one level of canvas whose composite children are
    segment tasks, so no canvas (and no message) holds more than about FANOUT signatures."""
    if isinstance(node, Leaf):
        return task_signature(app, dag, node.task_id, run_id)
    inline = size(node) <= inline_limit
    parts = []
    for i, child in enumerate(node.children):
        child_path = f"{path}.{i}" if path else str(i)
        if inline or isinstance(child, Leaf):
            parts.append(
                compile_node(app, dag, run_id, child, child_path, inline_limit=inline_limit)
            )
        else:
            parts.append(segment_signature(app, dag.dag_id, run_id, child_path))
    if isinstance(node, Series):
        return chain(*parts) if len(parts) > 1 else parts[0]
    assert isinstance(node, Parallel)
    # A chord that is a group's member is applied by ``group.apply_async`` with the group's own
    # id as ``group_id``, and ``chord.run`` copies it onto the chord's body, over the group id the
    # body was frozen with. In a chord's header the two are the same; a group that ends a chain
    # (``x | group([...])``) in a chord's header has an id of its own, so the body counted itself
    # in a group no chord waits on, and the outer chord never fired (Airflow's example_complex).
    # A chain of one applies the chord without that option: its body keeps its frozen group id.
    return group([_chain([p], app=app) if isinstance(p, chord) else p for p in parts])


def segment_signature(app: Celery, dag_id: str, run_id: str, path: str) -> Signature:
    return app.signature(SEGMENT_TASK, args=(dag_id, run_id, path), immutable=True)


def compile_run(
    app: Celery, dag: DAG, run_id: str, *, inline_limit: int = INLINE_LIMIT
) -> Signature:
    """The whole canvas of one DAG run: the plan's root, then the step that closes the run
    (unless the plan's closing task closes it: see the module docstring)."""
    plan = plan_for(dag)
    body = compile_node(app, dag, run_id, plan.root, "", inline_limit=inline_limit)
    if closing_task(dag) is not None:
        return body
    finish = app.signature(FINISH_TASK, args=(dag.dag_id, run_id), immutable=True)
    return chain(body, finish)


def map_signatures(
    app: Celery, dag: DAG, task_id: str, run_id: str, start: int, end: int
) -> Signature:
    """Canvas for mapped task runs ``start..end-1``: one group, nested in chunks of FANOUT
    (``beatflow.map_chunk`` tasks sending the next level). Sent as it is, never as a chord's
    header: the expansion's fan-in counts its instances in the results DB (``fan_out``)."""
    count = end - start
    if count <= FANOUT:
        return group([task_signature(app, dag, task_id, run_id, i) for i in range(start, end)])
    step = FANOUT
    while -(-count // step) > FANOUT:
        step *= FANOUT
    return group(
        [
            app.signature(
                MAP_CHUNK_TASK,
                args=(dag.dag_id, task_id, run_id, s, min(end, s + step)),
                immutable=True,
            )
            for s in range(start, end, step)
        ]
    )
