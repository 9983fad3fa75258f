"""The graph tests' DAG (issue 45, case 9): nine tasks, one a ``.map()``, two in a task group, a
long edge (audit -> notify) that must go around the tasks between. ``check.rows`` and ``report``
wait for a gate file the test creates, so a run is held while the page polls."""

import time

from beatflow import DAG, TaskGroup, task
from tests.dags._marks import MARKS

GATE_SECONDS = 120.0


def wait_gate(name: str) -> None:
    """Wait for the test to open this gate (the file exists); give up after two minutes."""
    deadline = time.monotonic() + GATE_SECONDS
    while not (MARKS / name).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@task
def list_ids() -> list[int]:
    return [1, 2, 3]


@task
def fetch_each(i: int) -> int:
    return i * 2


@task
def schema(values: list[int]) -> int:
    return len(values)


@task
def rows(values: list[int], ctx) -> int:
    wait_gate(f"gate-{ctx.run_id}-check")
    return sum(values)


@task
def merge(columns: int, total: int) -> str:
    return f"{columns} values, total {total}"


@task
def report(text: str, ctx) -> str:
    wait_gate(f"gate-{ctx.run_id}-report")
    return text.upper()


@task
def audit(ids: list[int]) -> int:
    return len(ids)


@task
def notify(text: str, audited: int) -> str:
    return f"{text} ({audited} audited)"


@task
def archive(text: str) -> None:
    return None


with DAG("web_graph", description="nine tasks, a map and a group: the graph tests' DAG"):
    ids = list_ids()
    fetched = fetch_each.map(ids)
    with TaskGroup("check", tooltip="the fetched values checked"):
        columns = schema(fetched)
        total = rows(fetched)
    archive(notify(report(merge(columns, total)), audit(ids)))
