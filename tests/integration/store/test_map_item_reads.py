"""What a .map() instance reads, through the node wrapper's own read on a real store: its own
item of the list it maps over (O(1) bytes, not the whole list), the whole list only where another
argument takes it, and a clear failure for an index past the list's end."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from celery import Celery

from beatflow import DAG, task
from beatflow.errors import NoSuchItemError
from beatflow.store import Store
from beatflow.worker.claim import read as read_rows
from beatflow.worker.inputs import inputs

WIDTH = 1_000


@task
def numbers() -> list[int]:
    return list(range(WIDTH))


@task
def square(x: int) -> int:
    return x * x


@task
def share(x: int, xs: list[int]) -> float:
    return x / sum(xs)


with DAG("m_items") as authored:
    src = numbers()
    square.map(src)
    share.map(src, src)
dag = authored.model


def _finish(store: Store, task_id: str, **outcome: object) -> None:
    key = f"m_items/r1/{task_id}"
    claim = store.claim_task_run(key, dag_id="m_items", run_id="r1", task_id=task_id)
    assert claim.token is not None
    assert store.finish_task_run(key, claim.token, state="success", **outcome)  # type: ignore[arg-type]


@pytest.fixture
def expanded(store: Store) -> Store:
    """A running m_items run whose source succeeded and whose two .map() tasks expanded."""
    store.create_dag_run("m_items", "r1", logical_date=datetime.now(UTC))
    assert [r.run_id for r in store.start_queued_dag_runs("m_items", 1)] == ["r1"]
    _finish(store, "numbers", result=list(range(WIDTH)))
    _finish(store, "square", map_count=WIDTH)
    _finish(store, "share", map_count=WIDTH)
    return store


def _noop() -> None:
    return None


def _read(store: Store, task_id: str, index: int):
    celery_task = Celery("m_items").task(name="m_items.node")(_noop)
    run, rows, claim, item_only = read_rows(
        store, celery_task, dag, dag.tasks[task_id], "r1", index, None
    )
    assert run is not None and run.state == "running"
    return rows, claim, item_only


def test_a_mapped_instance_reads_its_own_item_not_the_whole_list(expanded: Store):
    rows, claim, item_only = _read(expanded, "square", 7)
    assert item_only and claim is not None and claim.outcome == "run"  # read and claimed at once
    by_task = {t.task_id: t for t in rows if t.map_index < 0}
    assert by_task["numbers"].result == 7  # the item, never the list of 1,000
    assert by_task["square"].map_count == WIDTH  # the expander's row, for the bound
    assert inputs(dag, dag.tasks["square"], 7, rows, item_only=True) == ((7,), {})


def test_an_instance_whose_other_argument_takes_the_list_reads_it_whole(expanded: Store):
    rows, claim, item_only = _read(expanded, "share", 7)
    assert not item_only and claim is not None
    source = next(t for t in rows if t.task_id == "numbers")
    assert source.result == list(range(WIDTH))
    args, _ = inputs(dag, dag.tasks["share"], 7, rows)
    assert args == (7, list(range(WIDTH)))


def test_an_index_past_the_end_of_the_list_is_a_clear_error_either_way(expanded: Store):
    rows, _, item_only = _read(expanded, "square", WIDTH)
    assert item_only
    past = f'map index {WIDTH} is past the end of the {WIDTH} items of "numbers"'
    with pytest.raises(NoSuchItemError, match=past):
        inputs(dag, dag.tasks["square"], WIDTH, rows, item_only=True)
    rows, _, _ = _read(expanded, "share", WIDTH)
    with pytest.raises(NoSuchItemError, match=past):
        inputs(dag, dag.tasks["share"], WIDTH, rows)
