"""A small beatflow cluster for tests: a Celery app in the test process plus real worker
processes, on a Redis database and a results database given by the caller, loading tests/dags."""

from __future__ import annotations

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
from tests import procs

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
