"""A small beatflow cluster for tests: a Celery app in the test process plus real worker
processes, on a Redis database and a results database given by the caller, loading tests/dags."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from celery import Celery

from beatflow.app import create_app
from beatflow.runs import follow_run, trigger_dag
from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from beatflow.store import DagRunRecord, Store, TaskRunRecord
from tests import procs, services

DAGS = Path(__file__).resolve().parent / "dags"


@dataclass
class Cluster:
    app: Celery
    env: dict[str, str]
    tmp: Path
    workers: list[procs.Proc] = field(default_factory=list)

    @property
    def store(self) -> Store:
        return runtime_of(self.app).store

    @property
    def marks(self) -> Path:
        return Path(self.env["BEATFLOW_TEST_MARKS"])

    @property
    def settings_env(self) -> dict[str, str]:
        """The cluster's BEATFLOW_* settings, without the tests' marks folder."""
        return {k: v for k, v in self.env.items() if k != "BEATFLOW_TEST_MARKS"}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The `beatflow` command in a child process, with the cluster's settings."""
        return procs.run_beatflow(self.settings_env, *args)

    def count(self, name: str) -> int:
        path = self.marks / name
        return len(path.read_text()) if path.exists() else 0

    def start_worker(self, **kw: object) -> procs.Proc:
        worker = procs.celery_worker(
            self.tmp, self.env, queues=self.env["BEATFLOW_QUEUES"], **kw
        ).start()  # type: ignore[arg-type]
        self.workers.append(worker)
        procs.wait_worker_ready(self.app, worker)
        return worker

    def log(self) -> str:
        return "\n".join(w.log() for w in self.workers)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(w.log()[-chars:] for w in self.workers)

    def run(
        self, dag_id: str, timeout: float = 60.0, **kw: object
    ) -> tuple[DagRunRecord, dict[str, TaskRunRecord]]:
        record = trigger_dag(runtime_of(self.app), dag_id, **kw)  # type: ignore[arg-type]
        return self.wait(dag_id, record.run_id, timeout)

    def wait(
        self, dag_id: str, run_id: str, timeout: float = 60.0
    ) -> tuple[DagRunRecord, dict[str, TaskRunRecord]]:
        try:
            final = follow_run(runtime_of(self.app), dag_id, run_id, timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"run did not finish; worker logs:\n{self.log_tail()}") from None
        return final, self.tasks(dag_id, run_id)

    def tasks(self, dag_id: str, run_id: str) -> dict[str, TaskRunRecord]:
        return {
            (t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"): t
            for t in self.store.get_task_runs(dag_id, run_id)
        }


@contextmanager
def cluster(
    tmp: Path,
    redis_url: str,
    database_url: str,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    dags: Path = DAGS,
) -> Iterator[Cluster]:
    queue = f"q{uuid.uuid4().hex[:6]}"
    full = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": database_url,
        "BEATFLOW_DAGS_FOLDER": str(dags),
        "BEATFLOW_QUEUES": queue,
        "BEATFLOW_LEASE_SECONDS": "5",
        "BEATFLOW_TEST_MARKS": str(tmp / "marks"),
        **(env or {}),
    }
    settings = Settings.from_env({k: v for k, v in full.items() if k != "BEATFLOW_TEST_MARKS"})
    Store.from_settings(settings).upgrade()
    app = create_app(settings)
    c = Cluster(app=app, env=full, tmp=tmp)
    try:
        for _ in range(workers):
            c.start_worker()
        yield c
    finally:
        for w in c.workers:
            w.stop()
        app.close()


@contextmanager
def own_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp: Path,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    dags: Path = DAGS,
) -> Iterator[Cluster]:
    """``cluster`` on a fresh Redis database and a PostgreSQL database of its own (a random name:
    unique across xdist workers, whose tmp names repeat); the Redis database is flushed and the
    PostgreSQL one dropped afterwards."""
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    try:
        with cluster(tmp, redis_url, db_url, workers=workers, env=env, dags=dags) as c:
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
