"""The project's Celery settings."""

import os

broker_url = os.environ["BEATFLOW_BROKER_URL"]
result_backend = os.environ["BEATFLOW_BROKER_URL"]
imports = ("proj.tasks",)
task_routes = {"proj.tasks.add": {"queue": "proj_math"}}
task_annotations = {"proj.tasks.add": {"rate_limit": "100/s"}}
worker_prefetch_multiplier = 1
