"""The project's Celery settings."""

import os

broker_url = os.environ["BEATFLOW_BROKER_URL"]  # Redis, or RabbitMQ (amqp://)
# results in Redis: the broker's, or beside RabbitMQ the Redis beatflow keeps its state in
result_backend = os.environ.get("BEATFLOW_REDIS_URL") or os.environ["BEATFLOW_BROKER_URL"]
imports = ("proj.tasks",)
task_routes = {"proj.tasks.add": {"queue": "proj_math"}}
task_annotations = {"proj.tasks.add": {"rate_limit": "100/s"}}
worker_prefetch_multiplier = 1
beat_schedule = {"touch-every-second": {"task": "proj.tasks.touch", "schedule": 1.0}}
