"""Observability: the metrics (``metrics``), the exporter that fills them from Celery events,
Redis and the results database (``exporter``), SLA and stuck-work detection (``detect``), the
alert rules (``rules/``) and Flower's authentication defaults (``flower``)."""
