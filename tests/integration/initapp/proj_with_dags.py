"""The project's app as a team may also write it: beatflow's settings passed to init_app in
code (here the dags folder, next to this file) instead of BEATFLOW_* variables."""

from pathlib import Path

from celery import Celery

import beatflow

app = Celery("proj")
app.config_from_object("proj.celeryconfig")
beatflow.init_app(app, dags_folder=str(Path(__file__).resolve().parent / "dags"))
