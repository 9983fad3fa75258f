"""How a task's ``priority=`` orders a queue on each broker, as docs/how-to/rabbitmq.md says:
on RabbitMQ (beatflow's classic queues carry x-max-priority) 9 is served first; on Redis
(kombu's priority lists) 0 is, and a message of priority 9 waits behind them."""

from __future__ import annotations

import textwrap

import pytest

from tests.cluster import cluster
from tests.conftest import broker_env
from tests.procs import wait_for

pytestmark = pytest.mark.slow

ORDER = textwrap.dedent(
    """
    import os

    from celery import shared_task


    @shared_task(name="order.note")
    def note(tag: str) -> None:
        with open(os.environ["BEATFLOW_TEST_MARKS"] + "-order", "a") as f:
            f.write(tag + "\\n")
    """
)


@pytest.mark.parametrize(("broker", "first"), [("rabbitmq", "p9"), ("redis", "p0")])
def test_a_queue_serves_priorities_in_the_brokers_order(
    request, broker, first, tmp_path, redis_url, postgres_url
):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "order.py").write_text(ORDER)
    env = {**broker_env(request, broker, redis_url), "BEATFLOW_IMPORTS": "order"}
    with cluster(tmp_path, redis_url, postgres_url, env=env, dags=dags, workers=0) as c:
        note = c.app.tasks["order.note"]
        for i in range(3):  # waiting in the queue before any worker consumes it
            note.apply_async((f"p0-{i}",), priority=0)
        note.apply_async(("p9",), priority=9)
        for i in range(3, 6):
            note.apply_async((f"p0-{i}",), priority=0)
        c.start_worker(concurrency=1)  # one process, one message prefetched: queue order
        path = tmp_path / "marks-order"

        def order() -> list[str]:
            return path.read_text().split() if path.exists() else []

        wait_for(lambda: len(order()) == 7, 60, message="the seven tasks")
    served = [tag.split("-")[0] for tag in order()]
    if first == "p9":
        assert served == ["p9"] + ["p0"] * 6, served
    else:
        assert served[0] == "p0" and served.index("p9") > 0, served
