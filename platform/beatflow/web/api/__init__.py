"""The REST API under /api/v1 (JSON only; OpenAPI at /api/v1/openapi.json), one module per
resource: DAGs, runs and their verbs, backfills, task runs, dead letters and the audit log,
access, assets, pools, the notifications outbox (read only)."""

from beatflow.web.api import (
    access,
    assets,
    backfills,
    dags,
    letters,
    notifications,
    pools,
    runs,
    tasks,
)
from beatflow.web.api.base import router
from beatflow.web.api.dags import dag_page
from beatflow.web.api.openapi import openapi_document

__all__ = [
    "access",
    "assets",
    "backfills",
    "dag_page",
    "dags",
    "letters",
    "notifications",
    "openapi_document",
    "pools",
    "router",
    "runs",
    "tasks",
]
