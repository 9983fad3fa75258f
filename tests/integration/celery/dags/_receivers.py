"""Celery signal receivers the tests read back (a helper, not a DAG): every ``task_failure``,
``task_retry`` and ``task_prerun`` in the worker appends one line to a file in
BEATFLOW_TEST_MARKS, as a Sentry or logging integration would hear them."""

import json
import os
from pathlib import Path

from celery import signals

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))


def _append(file: str, **line: object) -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / file, "a") as f:
        f.write(json.dumps(line) + "\n")


@signals.task_failure.connect(weak=False)
def _failed(sender=None, task_id=None, exception=None, **_):
    _append("task_failure", name=sender.name, id=task_id, exc=type(exception).__name__)


@signals.task_retry.connect(weak=False)
def _retried(sender=None, request=None, reason=None, **_):
    _append("task_retry", name=sender.name, id=request.id, reason=str(reason))


@signals.task_prerun.connect(weak=False)
def _started(sender=None, task_id=None, **_):
    _append("task_prerun", name=sender.name, id=task_id)
