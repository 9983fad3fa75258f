"""EventFollower: a broker that refuses connections is retried with a growing, capped backoff
(1, 2, 4 ... s, as the log says), the events source is reported down, and stop() ends the
thread."""

from __future__ import annotations

import logging
import re
import socket

import pytest
from celery import Celery

from beatflow.observability.celery_events import EventFollower, EventHandler
from beatflow.observability.metrics import Metrics
from tests.procs import wait_for


def _refusing_broker() -> str:
    with socket.socket() as s:  # a port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def _delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [
        float(m.group(1))
        for r in caplog.records
        if (m := re.search(r"event stream lost .*; reconnecting in ([\d.]+)s", r.getMessage()))
    ]


def test_a_refusing_broker_is_retried_with_a_capped_backoff_until_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Celery("follower-test", broker=_refusing_broker(), set_as_current=False)
    handler = EventHandler(Metrics())
    follower = EventFollower(app, handler, max_backoff=1.5)
    with caplog.at_level(logging.WARNING, logger="beatflow.observability.celery_events"):
        follower.start()
        try:
            wait_for(lambda: len(_delays(caplog)) >= 2, timeout=60, message="two retries")
            up = handler.metrics.registry.get_sample_value(
                "beatflow_exporter_source_up", {"source": "events"}
            )
            assert up == 0.0
        finally:
            follower.stop(timeout=10)
    assert not follower.is_alive()
    assert _delays(caplog)[:2] == [1.0, 1.5]  # 1 s, then 2 s capped at max_backoff
    app.close()
