"""The compiled canvas of any DAG, walked message by message without a broker or a worker: Celery's
own canvas code applies it (as ``trigger_dag`` does) and every message it would publish is kept;
each "run" of one (in an order hypothesis picks) does what a worker does after the task returns:
``execution.canvas._send_next`` sends its links, its chain's next step and counts its chord
part, and a chord's body is sent once as many parts as ``set_chord_size`` set have come back, as
Celery's Redis backend does. Every DAG task must run exactly once, after all its upstreams, and
the step that closes the run must run once, last."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from celery import Celery, signature
from celery.app.task import Context
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beatflow.dag.compile import (
    FINISH_TASK,
    SEGMENT_TASK,
    closing_task,
    compile_run,
    plan_for,
    task_name,
)
from beatflow.dag.loader import load_dags
from beatflow.dag.model import DAG, TaskSpec
from beatflow.execution.canvas import _send_next

DAGS = Path(__file__).resolve().parents[2] / "dags"


class Walk:
    """One DAG run's canvas, applied for real by Celery's canvas code, its messages kept."""

    def __init__(self, dag: DAG) -> None:
        self.dag = dag
        self.app = Celery(
            "walk", broker="memory://", backend="cache+memory://", set_as_current=False
        )
        self.sent: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.size: dict[str, int] = {}
        self.parts: defaultdict[str, set[tuple[str, Any]]] = defaultdict(set)
        self.fired: set[str] = set()
        self.ran: list[str] = []
        self.app.amqp.send_task_message = self._keep
        backend = self.app.backend
        backend.apply_chord = lambda *a, **kw: None  # beatflow's backend saves no GroupResult
        backend.set_chord_size = self._set_size
        backend.on_chord_part_return = self._part_returned

    def _keep(self, producer: Any, name: str, message: Any, **options: Any) -> None:
        headers, _properties, body, _sent_event = message
        self.sent.append((headers, body[2]))

    def _set_size(self, group_id: str, size: int) -> None:
        self.size[group_id] = size

    def _part_returned(self, request: Any, state: str, result: Any) -> None:
        group_id = request.group
        self.parts[group_id].add((request.id, request.group_index))
        if group_id in self.fired or len(self.parts[group_id]) != self.size.get(group_id):
            return
        self.fired.add(group_id)
        signature(request.chord, app=self.app).apply_async((None,), parent_id=request.id)

    def run(self, pick: Any) -> None:
        compile_run(self.app, self.dag, "walk").apply_async()
        while self.sent:
            headers, embed = self.sent.pop(pick(len(self.sent)))
            name = headers["task"]
            assert name != SEGMENT_TASK, "a segment in a walk (keep the DAGs under INLINE_LIMIT)"
            self.ran.append(name)
            fields = {
                "id": headers["id"],
                "root_id": headers.get("root_id"),
                "group": headers.get("group"),
                "group_index": headers.get("group_index"),
                "chord": embed.get("chord"),
                "chain": embed.get("chain"),
                "callbacks": embed.get("callbacks"),
            }
            _send_next(self.app, self.app.backend, Context(fields))


def assert_runs_every_task_once_in_order(dag: DAG, pick: Any) -> None:
    walk = Walk(dag)
    walk.run(pick)
    names = {task_name(dag.dag_id, t): t for t in dag.tasks}
    ran = [names.get(n, n) for n in walk.ran]
    assert sorted(t for t in ran if t in dag.tasks) == sorted(dag.tasks), ran
    position = {t: i for i, t in enumerate(ran)}
    for task_id, spec in dag.tasks.items():
        for up in spec.upstream:
            assert position[up] < position[task_id], (up, task_id, ran)
    extra = [n for n in ran if n not in dag.tasks]
    assert extra in ([], [FINISH_TASK]), ran
    assert len(ran) == len(dag.tasks) + len(extra)
    if extra:
        assert ran[-1] == FINISH_TASK, ran
    else:  # the task that closes the run in process runs last
        assert ran[-1] == closing_task(dag), ran


def first(count: int) -> int:
    return 0


def last(count: int) -> int:
    return count - 1


def test_the_example_complex_shape_reaches_every_task_once_in_any_order():
    dag = load_dags(DAGS).dags["t_native_complex"]
    assert len(dag.tasks) == 37 and not plan_for(dag).exact  # barriers nested in chords
    assert_runs_every_task_once_in_order(dag, first)
    assert_runs_every_task_once_in_order(dag, last)


def make(n: int, edges: list[tuple[int, int]]) -> DAG:
    dag = DAG("walk")
    for i in range(n):
        dag.add_task(TaskSpec(task_id=f"t{i}", fn=lambda: None))
    for a, b in edges:
        lo, hi = sorted((a % n, b % n))
        if lo != hi:
            dag.tasks[f"t{hi}"].order_upstream.add(f"t{lo}")
    return dag


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 14),
    edges=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=40),
    data=st.data(),
)
def test_any_dag_compiles_to_a_canvas_that_runs_every_task_once_after_its_upstreams(
    n: int, edges: list[tuple[int, int]], data: st.DataObject
) -> None:
    dag = make(n, edges)
    assert_runs_every_task_once_in_order(
        dag, lambda count: data.draw(st.integers(0, count - 1), label="next message")
    )
