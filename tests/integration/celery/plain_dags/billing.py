"""Plain Celery tasks (BEATFLOW_IMPORTS=billing): not a DAG module; the tests count body runs by
appending to files in BEATFLOW_TEST_MARKS."""

import os
from pathlib import Path

from celery import shared_task

import beatflow

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))


def mark(name: str) -> int:
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / name, "a") as f:
        f.write("x")
    return len((MARKS / name).read_text())


@shared_task
def add(x: int, y: int) -> int:
    return x + y


@shared_task(bind=True)
def safety(self) -> dict:
    return {
        "acks_late": self.acks_late,
        "reject_on_worker_lost": self.reject_on_worker_lost,
        "accept_content": list(self.app.conf.accept_content),
        "serializer": self.serializer or self.app.conf.task_serializer,
        "app": self.app.main,
    }


@shared_task(base=beatflow.Idempotent, dedupe_key="invoice:{invoice_id}")
def send_invoice(invoice_id: str, amount: int) -> str:
    mark(f"invoice-{invoice_id}")
    return f"sent {invoice_id} for {amount}"


@shared_task(base=beatflow.Idempotent, dedupe_key="flaky:{n}", bind=True, max_retries=3)
def flaky(self, n: str) -> int:
    calls = mark(f"flaky-{n}")
    if calls < 2:
        raise self.retry(exc=ConnectionError(f"call {calls} failed"), countdown=0.1)
    return calls


@shared_task(base=beatflow.Idempotent, dedupe_key="doomed:{n}")
def doomed(n: str) -> None:
    mark(f"doomed-{n}")
    raise ValueError(f"doomed {n}")


@shared_task(base=beatflow.Idempotent, dedupe_key="slow:{key}")
def slow_invoice(key: str) -> str:
    import time

    mark(f"slow-{key}")
    time.sleep(1.5)  # long enough for the second call to find the key held
    return f"done {key}"
