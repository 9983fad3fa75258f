"""The worker side stays readable: the node wrapper's sequence fits one screen and no module of
the worker or of its plumbing grows past ~400 lines (split it by concern instead)."""

from __future__ import annotations

import inspect
from pathlib import Path

import beatflow.execution
import beatflow.worker
from beatflow.worker import node

SCREEN_LINES = 60
MODULE_LINES = 400


def test_the_node_sequence_reads_in_one_screen() -> None:
    lines, _ = inspect.getsourcelines(node.run_task)
    assert len(lines) <= SCREEN_LINES, f"node.run_task is {len(lines)} lines"


def test_no_worker_or_execution_module_passes_400_lines() -> None:
    too_long = {
        path.name: n
        for package in (beatflow.worker, beatflow.execution)
        for path in Path(package.__file__ or "").parent.glob("*.py")
        if (n := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert not too_long, f"split these modules: {too_long}"
