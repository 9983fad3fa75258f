"""Observability: every metric object (``metrics``), the exporter process (``exporter``) that fills
them from Celery events (``celery_events``), Redis (``broker``) and the results database
(``results``, with the SLA and stuck-work rules in ``detect``), serves them (``http``, ``render``),
the alert rules (``rules/``) and Flower's authentication default (``flower``)."""
