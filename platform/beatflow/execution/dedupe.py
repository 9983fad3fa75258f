"""A task run's default dedupe key: ``<dag_id>/<run_id>/<task_id>`` (``[<map index>]`` for a
.map() instance). The worker claims it; operators (clear, replay) find rows by it."""

from __future__ import annotations


def default_dedupe_key(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    key = f"{dag_id}/{run_id}/{task_id}"
    return key if map_index < 0 else f"{key}[{map_index}]"
