"""A bare Celery app on the test Redis (BEATFLOW_BROKER_URL), so `beatflow health` can be
tried against real worker and beat processes without the DAG machinery."""

from __future__ import annotations

from celery import Celery

from beatflow.settings import Settings

settings = Settings.from_env()
app = Celery("beatflow-health-test", broker=settings.broker_url, set_as_current=False)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule={},
    timezone="UTC",
)
