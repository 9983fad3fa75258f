"""TaskContext: what a running task may know about itself (ids, logical date, dedupe key,
params), passed as ``ctx`` to a task that asks for it and returned by ``beatflow.context()``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class TaskContext:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    dedupe_key: str
    logical_date: datetime | None
    params: Mapping[str, Any]
    celery_task_id: str | None
    log: logging.LoggerAdapter[logging.Logger] = field(repr=False)

    @property
    def conf(self) -> Mapping[str, Any]:
        return self.params


def make_logger(dag_id: str, **ids: Any) -> logging.LoggerAdapter[logging.Logger]:
    """A logger for user code in a task: every line carries the correlation ids."""
    return logging.LoggerAdapter(logging.getLogger(f"beatflow.task.{dag_id}"), ids)
