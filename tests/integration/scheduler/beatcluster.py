"""A beat test bed: a dags folder of its own (tmp), a Redis database and a PostgreSQL database of
its own, one real worker, and any number of real `celery -A beatflow beat` replicas."""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import redis
from kombu.exceptions import OperationalError

from beatflow import connections
from beatflow.app import create_app
from beatflow.scheduler.status import BeatStatus, read_status
from beatflow.settings import Settings
from beatflow.store import DagRunRecord, Store
from tests import procs

SECOND_DAG = """
from datetime import timedelta
from beatflow import DAG, task

@task
def noop() -> int:
    return 1

with DAG({dag_id!r}, schedule={schedule}, catchup={catchup}, max_active_runs=10000{extra}):
    noop()
"""


def dag_source(
    dag_id: str, schedule: str = "timedelta(seconds=1)", catchup: bool = False, extra: str = ""
) -> str:
    return textwrap.dedent(
        SECOND_DAG.format(dag_id=dag_id, schedule=schedule, catchup=catchup, extra=extra)
    )


@dataclass
class BeatCluster:
    tmp: Path
    env: dict[str, str]
    settings: Settings
    store: Store
    client: redis.Redis
    worker: procs.Proc | None = None
    beats: list[procs.Proc] = field(default_factory=list)

    @property
    def dags(self) -> Path:
        return self.tmp / "dags"

    @property
    def clock_file(self) -> Path:
        return self.tmp / "clock-offset"

    def write_dag(self, dag_id: str, **kwargs: object) -> None:
        (self.dags / f"{dag_id}.py").write_text(dag_source(dag_id, **kwargs))  # type: ignore[arg-type]

    def shift_clock(self, seconds: float) -> None:
        """Move every beat's clock by ``seconds`` (cumulative)."""
        current = float(self.clock_file.read_text() or 0) if self.clock_file.exists() else 0.0
        self.clock_file.write_text(str(current + seconds))

    def start_worker(self) -> procs.Proc:
        self.worker = procs.celery_worker(
            self.tmp, self.env, queues=self.settings.queues[0], concurrency=2
        ).start()
        deadline = time.monotonic() + 60
        while True:
            # a fresh app per attempt: a pooled connection may predate a Redis restart
            app = create_app(self.settings, load_dags=False)
            try:
                procs.wait_worker_ready(
                    app, self.worker, timeout=max(1.0, deadline - time.monotonic())
                )
                return self.worker
            except (redis.ConnectionError, OSError, OperationalError):
                if time.monotonic() > deadline:
                    raise
            finally:
                app.close()

    def start_beat(self, name: str, **extra_env: str) -> procs.Proc:
        argv = [sys.executable, "-m", "celery", "-A", "beatflow", "beat", "-l", "info"]
        env = procs.beatflow_env(
            {**self.env, "BEATFLOW_INSTANCE": name, "BEATFLOW_LOG_FORMAT": "text", **extra_env}
        )
        beat = procs.Proc(argv, env, self.tmp / f"beat-{name}.log", name=name).start()
        self.beats.append(beat)
        return beat

    def status(self) -> BeatStatus:
        return read_status(self.client)

    def leader(self) -> str | None:
        st = self.status()
        return None if st.leader is None else str(st.leader["instance"])

    def wait_leader(self, among: set[str] | None = None, timeout: float = 30.0) -> str:
        def found() -> str | None:
            name = self.leader()
            return name if name and (among is None or name in among) else None

        return str(procs.wait_for(found, timeout=timeout, message=f"a beat leader in {among}"))

    def runs(self, dag_id: str) -> list[DagRunRecord]:
        return self.store.list_dag_runs(dag_id, limit=100_000)

    def runs_per_logical_date(self, dag_id: str) -> Counter[datetime]:
        return Counter(r.logical_date for r in self.runs(dag_id) if r.logical_date is not None)

    def wait_runs(self, dag_id: str, n: int, timeout: float = 30.0) -> list[DagRunRecord]:
        try:
            procs.wait_for(
                lambda: len(self.runs(dag_id)) >= n,
                timeout=timeout,
                message=f"{n} DAG runs of {dag_id}",
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {len(self.runs(dag_id))} so far\n{self.logs()}") from None
        return self.runs(dag_id)

    def logs(self) -> str:
        parts = [f"--- {p.name}\n{p.log()[-4000:]}" for p in self.beats]
        if self.worker is not None:
            parts.append(f"--- worker\n{self.worker.log()[-12000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for beat in self.beats:
            beat.stop()
        if self.worker is not None:
            self.worker.stop()


@contextmanager
def beat_cluster(tmp: Path, redis_url: str, database_url: str, **env: str) -> Iterator[BeatCluster]:
    (tmp / "dags").mkdir(parents=True, exist_ok=True)
    queue = f"q{uuid.uuid4().hex[:6]}"
    full_env = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": database_url,
        "BEATFLOW_DAGS_FOLDER": str(tmp / "dags"),
        "BEATFLOW_QUEUES": queue,
        "BEATFLOW_LEASE_SECONDS": "5",
        "BEATFLOW_SCHEDULE_SYNC_INTERVAL": "1",
        "BEATFLOW_TEST_CLOCK_FILE": str(tmp / "clock-offset"),
        **env,
    }
    settings = Settings.from_env(full_env)
    store = Store.from_settings(settings)
    store.upgrade()
    client = connections.redis_client(redis_url, timeout=10)
    cluster = BeatCluster(tmp, full_env, settings, store, client)
    try:
        yield cluster
    finally:
        cluster.stop()
        client.close()
        store.close()


@pytest.fixture
def cluster(
    redis_url: str, make_postgres_db: Callable[[], str], tmp_path: Path
) -> Iterator[BeatCluster]:
    """A BeatCluster on the test's Redis database and a PostgreSQL database of its own (import
    it where it is used: ``from tests.integration.scheduler.beatcluster import cluster``)."""
    with beat_cluster(tmp_path, redis_url, make_postgres_db()) as c:
        yield c
