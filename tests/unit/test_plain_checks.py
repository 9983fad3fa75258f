"""Plain tasks that opt out of beatflow's safety settings stop the worker with the reason, and a
module in BEATFLOW_IMPORTS that cannot be imported is named with where it was looked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery

from beatflow import plain
from beatflow.errors import SettingsError
from beatflow.settings import Settings


def test_a_pickle_or_early_ack_plain_task_is_refused() -> None:
    app = Celery("t", set_as_current=False)
    app.conf.update(Settings().celery_config())

    @app.task(name="billing.pickled", serializer="pickle", shared=False)
    def pickled() -> None: ...

    @app.task(name="billing.early", acks_late=False, shared=False)
    def early() -> None: ...

    @app.task(name="billing.fine", shared=False)
    def fine() -> None: ...

    with pytest.raises(SettingsError) as info:
        plain.check_tasks(app, ["billing.pickled", "billing.early", "billing.fine"])
    problems = info.value.problems
    assert len(problems) == 2
    assert "'billing.pickled' sets serializer='pickle'" in problems[0]
    assert "'billing.early' sets acks_late=False" in problems[1]
    app.close()


def test_a_module_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    settings = Settings(dags_folder=str(tmp_path), imports=("no_such_module_x1",))
    with pytest.raises(SettingsError) as info:
        plain.import_module("no_such_module_x1", settings)
    (problem,) = info.value.problems
    assert "module 'no_such_module_x1' could not be imported (ModuleNotFoundError" in problem
    assert str(tmp_path) in problem
