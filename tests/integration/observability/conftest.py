"""A real worker and a real `beatflow exporter` per test module, on a Redis database and a
PostgreSQL database of their own, loading tests/dags; plus a /metrics scraper."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from beatflow.app import create_app
from beatflow.settings import Settings
from tests import procs, services

DAGS = Path(__file__).resolve().parents[2] / "dags"


class Samples(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    """One scrape: (sample name, labels) -> value."""

    def get_value(self, name: str, /, **labels: str) -> float:
        """The sample's value; 0 when the series does not exist (yet)."""
        return self.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, /, **labels: str) -> float:
        """Sum over every series of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.items() if n == name and want <= ls)


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:  # local URL
        text = response.read().decode()
    out = Samples()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def http_json(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # local URL
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


def exporter_proc(tmp: Path, env: Mapping[str, str], *extra: str) -> procs.Proc:
    argv = [
        sys.executable,
        "-c",
        "import sys; from beatflow.cli import main; sys.exit(main())",
        "exporter",
        "--host",
        "127.0.0.1",
        "--redis-interval",
        "0.2",
        "--db-interval",
        "0.3",
        "--worker-timeout",
        "5",
        *extra,
    ]
    name = f"exporter-{uuid.uuid4().hex[:6]}"
    return procs.Proc(argv, procs.beatflow_env(env), tmp / f"{name}.log", name=name)


def wait_exporter_ready(proc: procs.Proc, base: str, timeout: float = 30.0) -> None:
    def ready() -> bool:
        if proc.popen is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"exporter exited early:\n{proc.log()[-3000:]}")
        try:
            status, body = http_json(base + "/healthz")
        except OSError:
            return False
        return status == 200

    procs.wait_for(ready, timeout=timeout, message="the exporter's /healthz")


@dataclass
class Observed:
    app: Celery
    settings: Settings
    env: dict[str, str]
    worker: procs.Proc
    exporter: procs.Proc
    metrics_url: str
    marks: Path

    def log(self) -> str:
        return self.worker.log()

    def scrape(self) -> Samples:
        return scrape(self.metrics_url)

    def wait_metric(
        self, name: str, expected: float, /, timeout: float = 30.0, **labels: str
    ) -> Samples:
        """Scrape until ``name{labels}`` (summed) reaches ``expected``; return that scrape."""
        last: list[float] = []

        def reached() -> Samples | None:
            samples = self.scrape()
            value = samples.total(name, **labels)
            last[:] = [value]
            return samples if value >= expected else None

        try:
            return procs.wait_for(
                reached,
                timeout=timeout,
                interval=0.1,  # type: ignore[return-value]
                message=f"{name}{labels} >= {expected}",
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"{name}{labels} is {last} after {timeout}s, expected {expected}\n"
                f"exporter log:\n{self.exporter.log()[-3000:]}"
            ) from exc


@pytest.fixture(scope="module")
def observed(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Observed]:
    tmp = tmp_path_factory.mktemp("observed")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    queue = f"q{uuid.uuid4().hex[:6]}"
    port = services.free_port()
    env = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": db_url,
        "BEATFLOW_DAGS_FOLDER": str(DAGS),
        "BEATFLOW_QUEUES": queue,
        "BEATFLOW_LEASE_SECONDS": "5",
        "BEATFLOW_TEST_MARKS": str(tmp / "marks"),
        "BEATFLOW_METRICS_PORT": str(port),
    }
    settings = Settings.from_env(env)
    app = create_app(settings)
    from beatflow.store import Store

    Store.from_settings(settings).upgrade()
    exporter = exporter_proc(tmp, env).start()
    worker = procs.celery_worker(tmp, env, queues=queue, concurrency=2).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_exporter_ready(exporter, base)
        procs.wait_worker_ready(app, worker)
        yield Observed(
            app=app,
            settings=settings,
            env=env,
            worker=worker,
            exporter=exporter,
            metrics_url=base + "/metrics",
            marks=tmp / "marks",
        )
    finally:
        worker.stop()
        exporter.stop()
        app.close()
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
