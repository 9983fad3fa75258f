"""`beatflow exporter`: serve Prometheus metrics (Celery events, queue depth and backlog, beat
leader, DAG runs, dead letters, SLA misses, stuck task runs) on BEATFLOW_METRICS_PORT."""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

import click

from beatflow.cli.common import CliError, get_app_or_exit
from beatflow.logs import configure_logging
from beatflow.observability.exporter import Exporter
from beatflow.runtime import runtime_of


@click.command()
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to listen on (default: BEATFLOW_METRICS_PORT, 9808).",
)
@click.option(
    "--redis-interval",
    type=click.FloatRange(0.05),
    default=5.0,
    show_default=True,
    help="Seconds between reads of queue lengths and the beat leader.",
)
@click.option(
    "--db-interval",
    type=click.FloatRange(0.05),
    default=15.0,
    show_default=True,
    help="Seconds between reads of the results database (runs, SLA, stuck work).",
)
@click.option(
    "--worker-timeout",
    type=click.FloatRange(1),
    default=10.0,
    show_default=True,
    help="Seconds without a heartbeat after which a worker counts as down.",
)
def exporter(
    host: str, port: int | None, redis_interval: float, db_interval: float, worker_timeout: float
) -> None:
    """Serve /metrics and /healthz for Prometheus until SIGTERM or Ctrl-C."""
    app = get_app_or_exit()
    settings = runtime_of(app).settings
    configure_logging(settings)
    ex = Exporter(
        app,
        redis_interval=redis_interval,
        db_interval=db_interval,
        worker_timeout=worker_timeout,
    )
    try:
        server = ex.serve(host, port)
    except OSError as exc:
        raise CliError(
            f"cannot listen on {host}:{port or settings.metrics_port}: {exc}; set "
            "BEATFLOW_METRICS_PORT (or --port) to a free port"
        ) from exc
    ex.start()
    bound = server.server_address[1]
    logging.getLogger("beatflow.exporter").info(
        "beatflow exporter serving http://%s:%d/metrics",
        host,
        bound,
        extra={"event": "exporter_started", "port": bound},
    )

    def _stop(signum: int, frame: FrameType | None) -> None:
        ex.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    try:
        ex.wait()
    except KeyboardInterrupt:
        ex.stop()
