"""The project's Celery app: its own config, tasks and signal handlers, and beatflow added."""

import os
from pathlib import Path
from typing import Any

from celery import Celery, signals

import beatflow

app = Celery("proj")
app.config_from_object("proj.celeryconfig")
beatflow.init_app(app)


@signals.task_success.connect
def note_success(sender: Any = None, **_: Any) -> None:
    """The team's own handler: marks every task that succeeded."""
    marks = os.environ.get("PROJ_MARKS")
    if marks and sender is not None:
        Path(marks).mkdir(parents=True, exist_ok=True)
        (Path(marks) / sender.name).touch()
