"""The project's Celery app: its own config, and beatflow added."""

from celery import Celery

import beatflow

app = Celery("proj")
app.config_from_object("proj.celeryconfig")
beatflow.init_app(app)
