"""A task that fails for good is a FAILURE for Celery (its ``task_failure`` signal, Flower's task
list and API, the exporter's celery_task_failed_total) and a retry a RETRY, while the DAG goes on
by trigger rule and no downstream message is sent twice."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beatflow.store import DagRunRecord, TaskRunRecord
from tests import artifacts, procs
from tests.integration.celery.conftest import FLOWER_PASSWORD, FLOWER_USER, Stack, get_json
from tests.integration.observability.conftest import Samples

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def failed_run(stack: Stack) -> tuple[DagRunRecord, dict[str, TaskRunRecord]]:
    return stack.cluster.run("c_fail", timeout=90)


def test_the_dag_goes_on_by_trigger_rule_after_tasks_fail_in_a_chain_and_a_chord(
    failed_run: tuple[DagRunRecord, dict[str, TaskRunRecord]],
) -> None:
    final, tasks = failed_run
    assert final.state == "failed"
    states = {name: t.state for name, t in tasks.items()}
    assert states == {
        "boom": "failed",
        "strict": "upstream_failed",
        "chain_last": "success",
        "burst": "failed",
        "fine": "success",
        "join": "success",
    }


def test_celery_signals_see_each_final_failure_once_and_each_retry(
    stack: Stack, failed_run: object
) -> None:
    failures = collections.Counter(line["name"] for line in stack.lines("task_failure"))
    assert failures == {"c_fail.boom": 1, "c_fail.burst": 1}
    by_name = {line["name"]: line for line in stack.lines("task_failure")}
    assert by_name["c_fail.boom"]["exc"] == "ValueError"
    assert by_name["c_fail.burst"]["exc"] == "KeyError"
    retries = [line for line in stack.lines("task_retry") if line["name"] == "c_fail.boom"]
    assert len(retries) == 1
    assert "boom in a chain" in retries[0]["reason"]


def test_nothing_downstream_is_sent_or_run_twice(stack: Stack, failed_run: object) -> None:
    runs = collections.Counter(line["name"] for line in stack.lines("task_prerun"))
    # boom runs twice (one retry); everything else, the closing step included, exactly once.
    assert runs == {
        "c_fail.boom": 2,
        "c_fail.strict": 1,
        "c_fail.chain_last": 1,
        "c_fail.burst": 1,
        "c_fail.fine": 1,
        "c_fail.join": 1,
        "beatflow.finish_run": 1,
    }
    ids = [line["id"] for line in stack.lines("task_prerun") if line["name"] != "c_fail.boom"]
    assert len(ids) == len(set(ids))


def test_the_exporter_counts_failures_and_retries_not_successes(
    stack: Stack, failed_run: object
) -> None:
    def counted() -> Samples | None:
        s = stack.scrape()
        wanted = [
            s.total("celery_task_failed_total", name="c_fail.boom"),
            s.total("celery_task_failed_total", name="c_fail.burst"),
            s.total("celery_task_retried_total", name="c_fail.boom"),
            s.total("celery_task_succeeded_total", name="c_fail.join"),
        ]
        return s if all(wanted) else None

    samples = procs.wait_for(counted, timeout=30, message="the run counted by the exporter")
    assert isinstance(samples, Samples)
    for name in ("c_fail.boom", "c_fail.burst"):
        assert samples.total("celery_task_failed_total", name=name) == 1, name
        assert samples.total("celery_task_succeeded_total", name=name) == 0, name
    assert samples.total("celery_task_retried_total", name="c_fail.boom") == 1


def _flower_tasks(stack: Stack) -> dict[str, dict[str, object]]:
    tasks: dict[str, dict[str, object]] = get_json(stack.flower_url + "/api/tasks")
    return tasks


def test_flower_api_lists_the_failed_tasks_as_failure(stack: Stack, failed_run: object) -> None:
    def seen() -> dict[str, str] | None:
        states = {str(t.get("name")): str(t.get("state")) for t in _flower_tasks(stack).values()}
        wanted = ("c_fail.boom", "c_fail.burst", "c_fail.join")
        return states if all(name in states for name in wanted) else None

    states = procs.wait_for(seen, timeout=30, message="Flower to see the run's tasks")
    assert isinstance(states, dict)
    assert states["c_fail.boom"] == "FAILURE"
    assert states["c_fail.burst"] == "FAILURE"
    assert states["c_fail.join"] == "SUCCESS"
    boom = next(t for t in _flower_tasks(stack).values() if t.get("name") == "c_fail.boom")
    assert "boom in a chain" in str(boom.get("exception"))


def test_flowers_tasks_page_shows_the_failed_task(
    stack: Stack, failed_run: object, tmp_path: Path
) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    procs.wait_for(
        lambda: any(t.get("state") == "FAILURE" for t in _flower_tasks(stack).values()),
        timeout=30,
        message="Flower to hold a failed task",
    )
    shot = tmp_path / "flower-tasks-failure.png"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                http_credentials={"username": FLOWER_USER, "password": FLOWER_PASSWORD},
                viewport={"width": 1400, "height": 900},
            )
            page = context.new_page()
            page.goto(stack.flower_url + "/tasks?state=FAILURE")
            row = page.locator("table#tasks-table tbody tr", has_text="c_fail.burst")
            row.first.wait_for(timeout=30_000)
            assert "FAILURE" in row.first.inner_text()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 0
    artifacts.keep(shot)


def test_dlq_replay_prints_json(stack: Stack, failed_run: object) -> None:
    # last in this module: the replay runs burst (and its downstream) again
    env = procs.beatflow_env(stack.cluster.settings_env)
    cli = [sys.executable, "-c", "import sys; from beatflow.cli import main; sys.exit(main())"]
    listed = subprocess.run(
        [*cli, "dlq", "list", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    letter = next(d for d in json.loads(listed.stdout) if d["task_id"] == "burst")
    replayed = subprocess.run(
        [*cli, "dlq", "replay", str(letter["id"]), "--json", "--wait", "--timeout", "90"],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    out = json.loads(replayed.stdout)
    assert out == {
        "letter_id": letter["id"],
        "dag_id": "c_fail",
        "run_id": letter["run_id"],
        "state": "failed",  # burst fails again
    }
    assert replayed.returncode == 1
