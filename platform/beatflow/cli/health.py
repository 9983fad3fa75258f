"""`beatflow health worker|beat|exporter|flower|web|auto`: cheap local probes for container health
checks and Kubernetes probes. Each prints one line and exits 0 (healthy) or 1 (not)."""

from __future__ import annotations

import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from beatflow.cli.common import echo_json, json_option, load_settings
from beatflow.settings import Settings

PROCESSES = ("worker", "beat", "exporter", "flower", "web")


class Unhealthy(Exception):
    """Raised by a probe with the one-line reason the process is not healthy."""


def check_redis(url: str, timeout: float) -> None:
    """Connect to the Redis at ``url`` (plain, TLS or through Sentinel) and PING it, within
    ``timeout`` seconds."""
    from beatflow.connections import redis_client
    from beatflow.settings import mask_url

    try:
        client = redis_client(url, timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # any failure to reach Redis is the answer, not a crash
        raise Unhealthy(f"Redis at {mask_url(url)} unreachable: {exc}") from exc


def check_rabbitmq(url: str, timeout: float) -> None:
    """Open (and close) an AMQP connection to the RabbitMQ at ``url`` within ``timeout``
    seconds: one attempt, no retries."""
    from kombu.connection import Connection

    from beatflow.settings import mask_url

    try:
        with Connection(url, connect_timeout=timeout, heartbeat=0) as conn:  # type: ignore[no-untyped-call]
            conn.connect()
    except Exception as exc:  # any failure to reach RabbitMQ is the answer, not a crash
        raise Unhealthy(f"RabbitMQ at {mask_url(url)} unreachable: {exc}") from exc


def check_broker(settings: Settings, timeout: float) -> None:
    """The broker (Redis or RabbitMQ) and, beside RabbitMQ, beatflow's Redis are reachable."""
    if settings.broker_is_amqp:
        check_rabbitmq(settings.broker_url, timeout)
    check_redis(settings.effective_redis_url, timeout)


def check_worker(settings: Settings, node: str, timeout: float) -> str:
    """Ping only this worker's own node through the broker (never the whole cluster)."""
    from celery import Celery

    check_broker(settings, timeout)
    app = Celery("beatflow-health", set_as_current=False)
    app.conf.update(**_transport(settings))
    try:
        replies = app.control.inspect(destination=[node], timeout=timeout).ping() or {}
    finally:
        app.close()
    if node not in replies:
        raise Unhealthy(f"worker {node} did not answer a ping within {timeout:g}s")
    return f"worker {node} answered ping"


def check_beat(settings: Settings, timeout: float) -> str:
    """A beatflow beat of this container heartbeats in Redis and its tick loop makes progress.

    The replica is found by ``BEATFLOW_INSTANCE`` when set, else by this host name and the pid of
    a ``celery beat`` process here; any other beat (on another host, or a plain Celery beat)
    does not count. A stuck loop (no pass within the stall timeout) is unhealthy, so the probe
    restarts it; a stopped or dead beat stops heartbeating and is unhealthy too.
    """
    import redis

    from beatflow.scheduler.beat import redis_client
    from beatflow.scheduler.status import read_replicas

    check_redis(settings.effective_redbeat_url, timeout)
    try:
        replicas = read_replicas(redis_client(settings, timeout=timeout))
    except redis.RedisError as exc:
        raise Unhealthy(f"cannot read the beat heartbeats: {exc}") from exc
    if settings.instance:
        mine = [r for r in replicas if r.get("instance") == settings.instance]
        who = f"instance {settings.instance}"
    else:
        host = socket.gethostname()
        pids = {pid for pid, argv in _processes() if _is_beat(argv)}
        mine = [r for r in replicas if r.get("host") == host and r.get("pid") in pids]
        who = f"a `celery beat` process on {host} (pids {sorted(pids) or 'none'})"
    if not mine:
        raise Unhealthy(f"no beatflow beat heartbeat in Redis from {who}")
    replica = mine[0]
    age = replica.get("loop_age_seconds")
    if replica.get("stalled"):
        raise Unhealthy(
            f"beat {replica['instance']}: its tick loop has not completed a pass for {age:.0f}s "
            f"(limit {replica.get('stall_timeout')}s)"
        )
    return (
        f"beat {replica['instance']} is {replica.get('role')}, last loop pass {age or 0:.1f}s ago"
    )


def check_http(name: str, url: str, timeout: float) -> str:
    """GET ``url`` and expect a 2xx answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # (local URL)
            status = int(response.status)
    except (urllib.error.URLError, OSError) as exc:
        raise Unhealthy(f"{name} at {url} did not answer: {exc}") from exc
    if not 200 <= status < 300:
        raise Unhealthy(f"{name} at {url} answered HTTP {status}")
    return f"{name} answered HTTP {status} at {url}"


def check_exporter(settings: Settings, timeout: float) -> str:
    check_broker(settings, timeout)
    return check_http("exporter", f"http://127.0.0.1:{settings.metrics_port}/healthz", timeout)


def check_flower(settings: Settings, timeout: float) -> str:
    # Flower's /healthcheck needs no credentials, so the probe never handles the password.
    return check_http("flower", f"http://127.0.0.1:{settings.flower_port}/healthcheck", timeout)


def detect_process(argvs: Iterator[list[str]] | None = None) -> str:
    """Which beatflow process this container runs, from the command lines of its processes."""
    for argv in argvs if argvs is not None else _process_argvs():
        words = {Path(a).name for a in argv}
        if "exporter" in words and any("beatflow" in w for w in words):
            return "exporter"
        if "web" in words and "health" not in words and any("beatflow" in w for w in words):
            return "web"
        for name in ("worker", "beat", "flower"):
            if name in words and any(w.startswith("celery") for w in words):
                return name
    raise Unhealthy("cannot tell which beatflow process runs here; name it: beatflow health worker")


def _is_beat(argv: list[str]) -> bool:
    words = [Path(a).name for a in argv]
    return "beat" in words and any(w.startswith("celery") for w in words)


def _process_argvs() -> Iterator[list[str]]:
    for _, argv in _processes():
        yield argv


def _processes() -> Iterator[tuple[int, list[str]]]:
    proc = Path("/proc")
    pids = sorted((int(p.name) for p in proc.iterdir() if p.name.isdigit()), key=lambda p: p != 1)
    for pid in pids:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            yield pid, [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]


def _transport(settings: Settings) -> dict[str, object]:
    config = settings.celery_config()
    keys = ("broker_url", "broker_use_ssl", "broker_transport_options")
    return {k: config[k] for k in keys}


@click.command()
@click.argument("process", type=click.Choice((*PROCESSES, "auto")), default="auto")
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 60),
    default=5.0,
    show_default=True,
    help="Seconds to wait for Redis, RabbitMQ, the ping reply or the HTTP answer.",
)
@click.option(
    "--node", default=None, help="Worker node name to ping (default: celery@<this hostname>)."
)
@json_option
def health(process: str, timeout: float, node: str | None, as_json: bool) -> None:
    """Probe the beatflow PROCESS running in this container; exit 0 if healthy, 1 if not.

    worker: the broker (Redis, or RabbitMQ and Redis) reachable and this worker's own node
    answers a ping. beat: the beatflow beat
    of this container heartbeats in Redis and its tick loop is not stalled. exporter: Redis
    reachable and /healthz answers. flower: /healthcheck answers. auto (default): tell the
    process from the command line.
    """
    settings = load_settings()
    checks: dict[str, Callable[[], str]] = {
        "worker": lambda: check_worker(settings, node or f"celery@{socket.gethostname()}", timeout),
        "beat": lambda: check_beat(settings, timeout),
        "exporter": lambda: check_exporter(settings, timeout),
        "flower": lambda: check_flower(settings, timeout),
        # /healthz is beatflow web's one unauthenticated route
        "web": lambda: check_http("web", f"http://127.0.0.1:{settings.web_port}/healthz", timeout),
    }
    name = process
    try:
        name = detect_process() if process == "auto" else process
        message, healthy = checks[name](), True
    except Unhealthy as exc:
        message, healthy = str(exc), False
    if as_json:
        echo_json({"process": name, "healthy": healthy, "message": message})
    else:
        click.echo(f"{'healthy' if healthy else 'unhealthy'}: {message}")
    sys.exit(0 if healthy else 1)
