"""One chaos run: start the servers and the stack, load the workload, inject seeded faults for
the given duration while the beat fires and a trigger loop adds manual runs, then stop the
faults, let the system drain, check the invariants and report."""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from beatflow.chaos import checks, faults, faults_rabbitmq
from beatflow.chaos.rabbitmq_server import ChaosRabbitMQ
from beatflow.chaos.report import ChaosReport, clock_skew_env
from beatflow.chaos.servers import ChaosPostgres, ChaosRedis, free_port
from beatflow.chaos.stack import Stack
from beatflow.chaos.workload import LEDGER_ENV, MANUAL, SCHEDULED, create_ledger, write_module
from beatflow.settings import Settings

log = logging.getLogger(__name__)

MAX_ACTIVE = {"chaos_chain": 3, "chaos_fan": 2, "chaos_map": 2, "chaos_flaky": 4, "chaos_doomed": 4}
# Shorter than the production defaults so that a chaos run of minutes sees recoveries: a killed
# worker's message comes back after the visibility timeout, a paused worker's lease expires.
CHAOS_SETTINGS = {
    "BEATFLOW_VISIBILITY_TIMEOUT": "60",
    "BEATFLOW_TASK_TIME_LIMIT": "45",
    "BEATFLOW_TASK_SOFT_TIME_LIMIT": "30",
    "BEATFLOW_LEASE_SECONDS": "10",
    "BEATFLOW_LOG_FORMAT": "json",
}


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    duration: float = 120.0
    seed: int = 1
    workers: int = 2
    faults: Sequence[str] = ()  # empty: every kind of the broker (faults_rabbitmq.faults_for)
    gap: tuple[float, float] = (3.0, 8.0)  # seconds between faults
    trigger_every: tuple[float, float] = (1.0, 3.0)
    drain_timeout: float = 300.0
    workdir: Path | None = None
    keep: bool = False
    database_url: str | None = None  # an existing PostgreSQL: its faults are skipped
    clock_skew: float = 0.0  # seconds the last worker's clock is shifted by (libfaketime)
    broker: str = "redis"  # or "rabbitmq": a RabbitMQ node of the run's own holds the queues


class ChaosRun:
    def __init__(self, options: ChaosOptions, echo: Callable[[str], None] = print) -> None:
        self.options = options
        self.echo = echo
        self.rng = random.Random(options.seed)
        root = options.workdir or Path(tempfile.mkdtemp(prefix="beatflow-chaos-"))
        self.workdir = root.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.report = ChaosReport(
            options.seed,
            options.duration,
            workdir=str(self.workdir),
            clock_skew=options.clock_skew,
            broker=options.broker,
        )
        self.redis = ChaosRedis(self.workdir / "redis")
        self.rabbitmq = (
            ChaosRabbitMQ(self.workdir / "rabbitmq") if options.broker == "rabbitmq" else None
        )
        self.fault_kinds = faults_rabbitmq.faults_for(options.broker)
        self.postgres: ChaosPostgres | None = None
        self.stack: Stack | None = None
        self.stop_triggers = threading.Event()
        self.stop_sampling = threading.Event()
        self.peaks: dict[str, int] = {}

    # ------------------------------------------------------------------ the phases

    def run(self) -> ChaosReport:
        try:
            self._start()
            self._inject()
            self._drain()
            self._check()
        finally:
            self._teardown()
        return self.report

    def _start(self) -> None:
        self.echo(f"chaos: work folder {self.workdir}")
        self.redis.start()
        if self.rabbitmq is not None:
            self.rabbitmq.start()
        if self.options.database_url:
            database_url = self.options.database_url
            dsn = sa.engine.make_url(database_url).set(drivername="postgresql")
            ledger_dsn = dsn.render_as_string(hide_password=False)
        else:
            self.postgres = ChaosPostgres(self.workdir / "postgres")
            self.postgres.init()
            self.postgres.start()
            database_url, ledger_dsn = self.postgres.url, self.postgres.dsn
        self.dags_folder = self.workdir / "dags"
        self.start_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        write_module(self.dags_folder, self.start_at)
        env = {
            **CHAOS_SETTINGS,
            **self._broker_env(),
            "BEATFLOW_DATABASE_URL": database_url,
            "BEATFLOW_DAGS_FOLDER": str(self.dags_folder),
            LEDGER_ENV: ledger_dsn,
        }
        self.settings = Settings.from_env(env)
        self.engine = sa.create_engine(database_url, pool_pre_ping=True)
        from beatflow.store import Store

        store = Store.from_settings(self.settings)
        store.upgrade()
        store.close()
        create_ledger(self.engine)
        self.metrics_port = free_port()
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        self.stack = Stack(env, logs)
        for i in range(self.options.workers):
            last = i == self.options.workers - 1
            skewed = clock_skew_env(self.options.clock_skew) if last else {}
            self.stack.add_worker(f"chaos-worker-{i + 1}", skewed)
        self.stack.add_beat("chaos-beat-1")
        self.stack.add_beat("chaos-beat-2")
        self.stack.add_exporter(self.metrics_port)
        self.stack.start_all()
        self.app = self._app(env)
        self._wait(lambda: len(self.app.control.ping(timeout=0.5)) >= self.options.workers, 90,
                   "every worker to answer ping")  # fmt: skip
        self.echo(f"chaos: stack up ({self.options.workers} workers, 2 beats, exporter)")

    def _broker_env(self) -> dict[str, str]:
        if self.rabbitmq is None:
            return {"BEATFLOW_BROKER_URL": self.redis.url}
        # Redis keeps beatflow's own state (the beat's lock and schedules, results, leases)
        return {"BEATFLOW_BROKER_URL": self.rabbitmq.url, "BEATFLOW_REDIS_URL": self.redis.url}

    def _app(self, env: dict[str, str]) -> Any:
        from beatflow.app import create_app

        saved = os.environ.get(LEDGER_ENV)
        os.environ[LEDGER_ENV] = env[LEDGER_ENV]  # the workload module reads it at import
        try:
            return create_app(self.settings)
        finally:
            if saved is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = saved

    def _inject(self) -> None:
        assert self.stack is not None
        ctx = faults.FaultContext(
            stack=self.stack,
            redis_server=self.redis,
            postgres=self.postgres,
            rng=self.rng,
            dags_folder=self.dags_folder,
            start=self.start_at,
            lock_timeout=self.settings.beat_lock_timeout,
            lease_seconds=self.settings.lease_seconds,
            rabbitmq=self.rabbitmq,
        )
        trigger_thread = threading.Thread(target=self._trigger_loop, daemon=True)
        trigger_thread.start()
        threading.Thread(target=self._sample_slots, daemon=True).start()
        kinds = [k for k in self.options.faults or self.fault_kinds if k in self.fault_kinds]
        order = list(kinds)
        self.rng.shuffle(order)  # every kind once (as time allows), then at random
        began = time.monotonic()
        end = began + self.options.duration
        # The duration is a minimum: every chosen kind is injected once before the run may end.
        while kinds and (order or time.monotonic() < end):
            time.sleep(self.rng.uniform(*self.options.gap))
            if not order and time.monotonic() >= end:
                break
            kind = order.pop(0) if order else self.rng.choice(kinds)
            died = self.stack.revive()  # died on their own since the last fault: restart them
            what = self.fault_kinds[kind](ctx)
            died += self.stack.revive()
            self.report.faults[kind] += 1
            stamp = f"{time.monotonic() - began:6.1f}s"
            self.report.unplanned_exits += [f"{stamp} {d}" for d in died]
            line = f"{stamp} {what}" + (
                f" (died on its own, restarted: {'; '.join(died)})" if died else ""
            )
            self.report.fault_log.append(line)
            self.echo(f"chaos: {line}")
        self.stop_at = datetime.now(UTC)
        self.report.duration = time.monotonic() - began
        self.stop_triggers.set()
        trigger_thread.join(timeout=60)
        self.report.takeovers = ctx.takeovers
        self._finish_rollout(ctx)

    def _finish_rollout(self, ctx: faults.FaultContext) -> None:
        """A deploy completes: every worker ends on the newest DAG module, none stays paused."""
        assert self.stack is not None
        for child in self.stack.children:
            if child.paused:
                child.signal(signal.SIGCONT)
        if ctx.module_version > 1:
            for worker in self.stack.workers:
                worker.stop(grace=30)
                worker.start()
        self.stack.revive()

    def _trigger_loop(self) -> None:
        from beatflow.runs import trigger_dag
        from beatflow.runtime import runtime_of

        while not self.stop_triggers.wait(self.rng.uniform(*self.options.trigger_every)):
            dag_id = self.rng.choice(MANUAL)
            try:
                trigger_dag(runtime_of(self.app), dag_id)
                self.report.triggers[f"{dag_id} sent"] += 1
            except Exception as exc:  # noqa: BLE001 - faults make triggers fail; count them
                self.report.triggers[f"{dag_id} refused"] += 1
                log.info("chaos trigger of %s refused: %s", dag_id, exc)

    def _sample_slots(self) -> None:
        """Read how many runs of each DAG run at once, four times a second, until the checks."""
        while not self.stop_sampling.wait(0.25):
            try:
                with self.engine.connect() as conn:
                    now = checks.running_by_dag(conn)
            except sa.exc.SQLAlchemyError:
                continue  # PostgreSQL is down on purpose
            for dag_id, n in now.items():
                self.peaks[dag_id] = max(n, self.peaks.get(dag_id, 0))

    def _drain(self) -> None:
        """Wait until every run of the fault window (logical date up to the last fault) is final
        and every tick of it has its run; then stop the beats and let the later runs end too, so
        the checks and the metrics see a database that no longer changes."""
        started = time.monotonic()
        self.echo("chaos: faults stopped; draining")

        def window_done() -> bool:
            try:
                with self.engine.connect() as conn:
                    active = conn.execute(
                        sa.text(
                            "SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running') "
                            "AND logical_date <= :stop"
                        ),
                        {"stop": self.stop_at},
                    ).scalar_one()
                    ticks = checks.check_ticks(conn, self.start_at, self.stop_at)
                    return bool(active == 0 and ticks.ok)
            except sa.exc.SQLAlchemyError:
                return False

        def all_done() -> bool:
            try:
                with self.engine.connect() as conn:
                    active = conn.execute(
                        sa.text(
                            "SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')"
                        )
                    ).scalar_one()
                    return bool(active == 0)
            except sa.exc.SQLAlchemyError:
                return False

        try:
            self._wait(window_done, self.options.drain_timeout, "every run of the window to end")
            self.report.drained_in = time.monotonic() - started
            assert self.stack is not None
            for beat in self.stack.beats:
                beat.stop()
            self._wait(all_done, self.options.drain_timeout, "the runs fired after the window")
        except TimeoutError as exc:
            self.echo(f"chaos: {exc}")

    def _check(self) -> None:
        self.stop_sampling.set()
        with self.engine.connect() as conn:
            self.report.checks = [
                checks.check_ticks(conn, self.start_at, self.stop_at),
                checks.check_runs_final(conn),
                checks.check_effects(conn),
                checks.check_dead_letters(conn),
                checks.check_slots(conn, MAX_ACTIVE, self.peaks),
            ]
            self.report.load = self._load(conn)
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # The exporter polls the database: give it a few polls to catch up before comparing.
        deadline = time.monotonic() + 60
        while True:
            with self.engine.connect() as conn:
                metrics = checks.check_metrics(conn, url, len(self.report.takeovers))
            if metrics.ok or time.monotonic() > deadline:
                break
            time.sleep(1)
        self.report.checks.append(metrics)

    def _load(self, conn: sa.Connection) -> dict[str, Any]:
        minutes = max(1e-9, (self.stop_at - self.start_at).total_seconds() / 60)
        runs = conn.execute(sa.text("SELECT count(*) FROM dag_runs")).scalar_one()
        tasks = conn.execute(sa.text("SELECT count(*) FROM task_runs")).scalar_one()
        retried = conn.execute(
            sa.text("SELECT count(*) FROM task_runs WHERE try_number > 1")
        ).scalar_one()
        rerun = conn.execute(
            sa.text(
                "SELECT count(*) FROM (SELECT dedupe_key FROM chaos_attempts GROUP BY dedupe_key "
                "HAVING count(*) > 1) AS t"
            )
        ).scalar_one()
        by_state: dict[str, int] = dict(
            conn.execute(sa.text("SELECT state, count(*) FROM dag_runs GROUP BY state")).all()
        )
        return {
            "dag_runs": runs,
            "task_runs": tasks,
            "dag_runs_per_minute": round(runs / minutes, 1),
            "task_runs_per_minute": round(tasks / minutes, 1),
            "runs_by_state": by_state,
            "task_runs_tried_again": retried,
            "effects_rerun_and_absorbed_by_dedupe": rerun,
            "scheduled_dags": len(SCHEDULED),
        }

    def _teardown(self) -> None:
        self.stop_triggers.set()
        self.stop_sampling.set()
        if self.stack is not None:
            self.stack.stop_all()
        self.redis.stop()
        if self.rabbitmq is not None:
            self.rabbitmq.kill()
        if self.postgres is not None:
            self.postgres.close()
        if hasattr(self, "engine"):
            self.engine.dispose()
        if not self.options.keep and self.report.ok:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @staticmethod
    def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)
