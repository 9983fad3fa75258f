"""A newcomer's first mistakes, through the real `beatflow` command and a real worker: a dags
folder that is not where the process looks, and a RabbitMQ URL with the wrong password or vhost.
Each ends in one line that says where beatflow looked or what the broker said, never a
traceback."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from beatflow.cli.common import EXIT_FAILED
from tests.integration.cli.conftest import cli_env
from tests.procs import ROOT, celery_worker, run_beatflow, wait_for
from tests.services.rabbitmq_server import RabbitServer


def test_an_unknown_dag_names_the_missing_dags_folder_and_the_variable(
    redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "dags"  # a project started from the wrong directory: no dags/ here
    done = run_beatflow(cli_env(redis_url, postgres_url, missing), "dags", "trigger", "etl")
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stderr.startswith(
        f'error: no DAG "etl" is loaded (the dags folder {missing} does not exist): '
        "set BEATFLOW_DAGS_FOLDER"
    ), done.stderr


def test_a_worker_started_without_its_dags_folder_says_so_when_ready(
    redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "dags"
    worker = celery_worker(tmp_path, cli_env(redis_url, postgres_url, missing)).start()
    try:
        wait_for(
            lambda: "worker: 0 DAGs loaded from" in worker.log(),
            timeout=60,
            message="the worker's start-up line",
        )
        assert (
            f"its tasks fail here: {missing}: dags folder does not exist: set BEATFLOW_DAGS_FOLDER"
            in worker.log()
        ), worker.log()[-3000:]
    finally:
        worker.stop()


def test_an_unknown_dag_without_a_close_match_says_where_it_looked(
    redis_url: str, postgres_url: str
) -> None:
    dags = ROOT / "tests" / "dags"
    done = run_beatflow(cli_env(redis_url, postgres_url, dags), "dags", "trigger", "qqqqqqqqqq")
    assert done.returncode == EXIT_FAILED, done.stderr
    assert f'no DAG "qqqqqqqqqq" is loaded from {dags} (' in done.stderr, done.stderr
    assert "see `beatflow dags list`" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("part", "says"),
    [("password", "ACCESS_REFUSED"), ("vhost", "NOT_ALLOWED - vhost")],
)
def test_a_rabbitmq_url_the_broker_refuses_is_one_error_line_and_the_run_stays_queued(
    redis_url: str,
    postgres_url: str,
    rabbitmq_server: RabbitServer,
    part: str,
    says: str,
) -> None:
    url = urlsplit(rabbitmq_server.url)
    if part == "password":
        url = url._replace(netloc=f"{url.username}:not-the-password@{url.hostname}:{url.port}")
    else:
        url = url._replace(path="/no-such-vhost")
    env = cli_env(redis_url, postgres_url, ROOT / "dags")
    env |= {"BEATFLOW_BROKER_URL": urlunsplit(url), "BEATFLOW_REDIS_URL": redis_url}
    done = run_beatflow(env, "dags", "trigger", "example_etl", "--run-id", "first", "--wait")
    assert done.returncode == EXIT_FAILED, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "\nerror: broker unreachable, DAG run example_etl/first not sent (" in (
        "\n" + done.stderr
    ), done.stderr
    assert says in done.stderr, done.stderr
    shown = run_beatflow(env, "runs", "show", "example_etl", "first", "--json")
    assert json.loads(shown.stdout)["state"] == "queued", shown.stderr  # the reconciler sends it
