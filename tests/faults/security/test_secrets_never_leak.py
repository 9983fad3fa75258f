"""Redis and PostgreSQL passwords, given only through the environment, never appear where an
operator or an attacker reads: worker, beat and exporter logs (through a database outage, whose
errors name the database), `beatflow config show`, errors and tracebacks stored in the results
database, and /metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from beatflow.app import create_app
from beatflow.runs import follow_run, trigger_dag
from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from beatflow.store import Store
from tests import procs, services
from tests.services._base import free_port

REDIS_PW = "Redis-Pw-7f3a9c"
PG_PW = "Pg-Pw-51d2e8"
DAGS = Path(__file__).resolve().parents[2] / "dags"
BEATFLOW = str(Path(sys.executable).with_name("beatflow"))


@pytest.mark.slow
def test_passwords_from_the_environment_never_reach_logs_config_db_or_metrics(
    own_redis: services.OwnedRedis, own_postgres: services.OwnedPostgres, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(own_redis.url)
    client.config_set("requirepass", REDIS_PW)
    client.close()
    broker = f"redis://:{REDIS_PW}@127.0.0.1:{own_redis.port}/0"
    # trust authentication ignores the password, but every URL that carries it must hide it
    database = f"postgresql+psycopg://postgres:{PG_PW}@127.0.0.1:{own_postgres.port}/postgres"
    env = {
        "BEATFLOW_BROKER_URL": broker,
        "BEATFLOW_DATABASE_URL": database,
        "BEATFLOW_DAGS_FOLDER": str(DAGS),
        "BEATFLOW_QUEUES": "secrets",
        "BEATFLOW_LEASE_SECONDS": "5",
        "BEATFLOW_TEST_MARKS": str(tmp_path / "marks"),
    }
    marks = tmp_path / "marks"
    settings = Settings.from_env({k: v for k, v in env.items() if "TEST" not in k})
    Store.from_settings(settings).upgrade()
    metrics_port = free_port()
    worker = procs.celery_worker(tmp_path, env, queues="secrets").start()
    exporter = procs.Proc(
        [BEATFLOW, "exporter", "--port", str(metrics_port)],
        procs.beatflow_env(env),
        tmp_path / "exporter.log",
    ).start()
    app = create_app(settings)
    try:
        procs.wait_worker_ready(app, worker)
        ok = trigger_dag(runtime_of(app), "t_effect")
        failing = trigger_dag(
            runtime_of(app), "t_rules"
        )  # fails for good: error and traceback stored
        # A database outage while a task runs: its end meets the outage, whose errors name the
        # database. The task is held until the database is down, so the outage cannot miss it.
        held = trigger_dag(runtime_of(app), "t_gated", run_id="secrets-held", conf={"hold": 120.0})
        procs.wait_for(lambda: (marks / "gated-secrets-held").exists(), timeout=60,
                       message="the held task to start")  # fmt: skip
        own_postgres.stop()
        (marks / "gate-secrets-held").touch()
        procs.wait_for(lambda: "results database unavailable" in worker.log(), timeout=60,
                       message="the held task to meet the outage")  # fmt: skip
        later = None
        try:
            later = trigger_dag(runtime_of(app), "t_effect")
        except Exception as exc:  # noqa: BLE001 - the outage may refuse the trigger
            assert PG_PW not in str(exc) and REDIS_PW not in str(exc)
        own_postgres.start()
        for run in (ok, failing, held, later):
            if run is not None:
                follow_run(runtime_of(app), run.dag_id, run.run_id, timeout=120)
        procs.wait_for(
            lambda: "beatflow_" in _scrape(metrics_port), timeout=60, message="the exporter"
        )
        metrics = _scrape(metrics_port)
        shown = subprocess.run(
            [BEATFLOW, "config", "show"],
            env=procs.beatflow_env(env),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        engine = sa.create_engine(database)
        with engine.connect() as conn:
            stored = " ".join(
                str(v)
                for row in conn.execute(
                    sa.text(
                        "SELECT error, traceback FROM task_runs UNION ALL "
                        "SELECT error, traceback FROM dead_letters"
                    )  # fmt: skip
                )
                for v in row
            )
        engine.dispose()
    finally:
        worker.stop()
        exporter.stop()
        app.close()
    logs = worker.log() + exporter.log()
    assert "unavailable" in logs or "could not" in logs or "refused" in logs  # outage was seen
    assert "always broken" in stored  # the failing task's error is there to be read
    for place, text in {
        "worker and exporter logs": logs,
        "config show": shown,
        "errors stored in the database": stored,
        "/metrics": metrics,
    }.items():
        assert REDIS_PW not in text, f"the Redis password leaks through {place}"
        assert PG_PW not in text, f"the PostgreSQL password leaks through {place}"
    assert "****" in shown
    # Every report of the outage names the database, masked: the masking was exercised, not
    # avoided, and an operator reading any one of those lines learns which database is down.
    outage = [line for line in logs.splitlines() if "results database unavailable" in line]
    assert outage, "the worker logged the outage"
    for line in outage:
        assert "postgres:****@" in line, f"an outage report that does not name the database: {line}"


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def test_no_password_is_accepted_on_the_command_line() -> None:
    """Secrets come from the environment or files: no command takes a password option."""
    result = subprocess.run(
        [BEATFLOW, "--help"], capture_output=True, text=True, timeout=60, check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
    )  # fmt: skip
    for command in [line.split()[0] for line in result.stdout.split("Commands:")[1].splitlines()
                    if line.strip()]:  # fmt: skip
        help_text = subprocess.run(
            [BEATFLOW, command, "--help"], capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
        ).stdout  # fmt: skip
        assert "--password" not in help_text, f"`beatflow {command}` takes a password in argv"
