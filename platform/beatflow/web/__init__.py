"""``beatflow web``: one ASGI app (FastAPI) serving the REST API under /api/v1 and server-rendered
pages (DAG list, DAG graph and grid, runs, task runs with logs, dead letters), authenticated
everywhere but /healthz. Built by :func:`create_web_app`."""

from __future__ import annotations

from beatflow.web.app import create_web_app

__all__ = ["create_web_app"]
