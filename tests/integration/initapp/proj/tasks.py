"""The project's own tasks and signal handler."""

import os
from pathlib import Path
from typing import Any

from celery import signals
from proj.celery import app

import beatflow


def _mark(name: str) -> None:
    marks = os.environ.get("PROJ_MARKS")
    if marks:
        Path(marks).mkdir(parents=True, exist_ok=True)
        with open(Path(marks) / name, "a") as f:
            f.write("x")


@app.task(bind=True)
def add(self: Any, x: int, y: int) -> dict[str, Any]:
    return {"sum": x + y, "routing_key": self.request.delivery_info.get("routing_key")}


@app.task
def touch() -> None:
    """The project's periodic task (beat_schedule in celeryconfig)."""
    _mark("touched")


@app.task(base=beatflow.Idempotent, dedupe_key="charge:{order}")
def charge(order: str) -> str:
    """Charges once per order, however often it is sent."""
    _mark(f"charged-{order}")
    return f"charged {order}"


@signals.task_success.connect
def note_success(sender: Any = None, **_: Any) -> None:
    """The team's own handler: marks every task that succeeded."""
    marks = os.environ.get("PROJ_MARKS")
    if marks and sender is not None:
        Path(marks).mkdir(parents=True, exist_ok=True)
        (Path(marks) / sender.name).touch()
