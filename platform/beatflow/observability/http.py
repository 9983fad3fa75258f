"""The exporter's HTTP endpoints: ``/metrics`` (Prometheus text format) and ``/healthz`` (200
while the exporter's threads run, 503 otherwise; a source being down is not unhealthy — the
metrics say so — because restarting the exporter would not bring Redis back)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, dict[str, Any]]]


def make_server(
    render: Callable[[], bytes], health: Health, host: str, port: int
) -> ThreadingHTTPServer:
    """An HTTP server (not started) answering /metrics and /healthz."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, render())
            elif path == "/healthz":
                ok, detail = health()
                body = json.dumps({"status": "ok" if ok else "failing", **detail}).encode()
                self._send(200 if ok else 503, "application/json", body)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
