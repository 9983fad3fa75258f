"""Log lines: Celery's own task lines gain the correlation ids and lose the payload reprs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from beatflow.logs import configure_logging, correlation
from beatflow.settings import Settings


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _capture() -> tuple[io.StringIO, logging.Logger]:
    stream = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=stream, force=True)
    return stream, logging.getLogger("celery.app.trace")


def test_celerys_task_line_carries_the_dag_task_and_run_ids() -> None:
    stream, log = _capture()
    context = {
        "id": "c-1",
        "name": "etl.load",
        "args": "('manual__2026',)",
        "kwargs": "{}",
        "return_value": "'secret rows'",
        "runtime": 0.5,
    }
    log.info("Task %(name)s[%(id)s] succeeded in %(runtime)ss", context, extra={"data": context})
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert line["celery_task_id"] == "c-1"
    assert (line["dag_id"], line["task_id"], line["run_id"]) == ("etl", "load", "manual__2026")
    assert line["data"] == {"runtime": 0.5}
    assert "secret rows" not in stream.getvalue().replace(line["message"], "")


def test_a_run_closing_task_line_carries_its_dag_and_run() -> None:
    stream, log = _capture()
    context = {"id": "c-2", "name": "beatflow.finish_run", "args": "('etl', 'r-7')"}
    log.info("Task received", extra={"data": context})
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert (line["dag_id"], line["run_id"]) == ("etl", "r-7")
    assert "task_id" not in line


def test_ids_of_the_current_task_run_win_over_what_celery_passes() -> None:
    stream, log = _capture()
    with correlation(dag_id="etl", run_id="r-1", task_id="load", celery_task_id="c-3"):
        log.info("inside", extra={"data": {"id": "other", "name": "x.y", "args": "('r-9',)"}})
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert (line["run_id"], line["celery_task_id"]) == ("r-1", "c-3")


@pytest.mark.parametrize(
    ("args", "run_id"),
    [
        ("('manual__2026-12-04T17:43:00+00:00', None)", "manual__2026-12-04T17:43:00+00:00"),
        ("('r-1', 3)", "r-1"),
        ("['r-2', -1]", "r-2"),
        ("('it\\'s', None)", "it's"),  # an escape: parsed, not matched
        ("(5, 'r-3')", None),  # the run id is the first argument or nothing
        ("('a' 'b', None)", "ab"),
        ("not a repr", None),
    ],
)
def test_the_run_id_is_read_off_celerys_argument_repr(args: str, run_id: str | None) -> None:
    stream, log = _capture()
    log.info("Task received", extra={"data": {"id": "c-4", "name": "etl.load", "args": args}})
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert line.get("run_id") == run_id
    assert (line["dag_id"], line["task_id"]) == ("etl", "load")
