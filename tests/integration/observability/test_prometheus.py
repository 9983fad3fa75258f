"""A real Prometheus server scrapes a real exporter and evaluates beatflow's alert rules file: a
late DAG run makes BeatflowDagSlaMissed fire, a dead letter makes BeatflowDeadLettersPresent
pending, and every rule evaluates without error."""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from beatflow.store import Store
from tests import procs, services
from tests.integration.observability.conftest import exporter_proc, wait_exporter_ready

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "platform/beatflow/observability/rules/beatflow.rules.yml"


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        message = "prometheus not found: install Debian's prometheus package (make deps-system)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as response:  # local URL
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def _query(base: str, promql: str) -> list[float]:
    return [float(r["value"][1]) for r in _api(base, "query", query=promql)["result"]]


def _alerts(base: str) -> list[dict[str, Any]]:
    return list(_api(base, "alerts")["alerts"])


def test_prometheus_scrapes_the_exporter_and_fires_beatflow_alerts(
    redis_url: str,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    binary = _prometheus_binary()
    store = Store(postgres_url)
    store.upgrade()
    port, prom_port = services.free_port(), services.free_port()
    env = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": postgres_url,
        "BEATFLOW_DAGS_FOLDER": str(ROOT / "tests/dags"),
        "BEATFLOW_METRICS_PORT": str(port),
        "BEATFLOW_TEST_MARKS": str(tmp_path / "marks"),
    }
    exporter = exporter_proc(tmp_path, env).start()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        f"  - job_name: beatflow\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    prometheus = procs.Proc(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        dict(os.environ),
        tmp_path / "prometheus.log",
        name="prometheus",
    ).start()
    base = f"http://127.0.0.1:{prom_port}"
    try:
        wait_exporter_ready(exporter, f"http://127.0.0.1:{port}")

        def ready() -> bool:
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        procs.wait_for(ready, timeout=60, message=f"prometheus ready\n{prometheus.log()}")
        # the SLA counter's zero must be scraped first, so the miss is an increase
        procs.wait_for(
            lambda: _query(base, 'beatflow_sla_misses_total{dag="obs_sla"}') == [0.0],
            timeout=30,
            message="prometheus to scrape the exporter",
        )

        late = datetime.now(UTC) - timedelta(seconds=30)
        store.create_dag_run("obs_sla", "late", logical_date=late)
        store.add_dead_letter(
            dedupe_key="obs_counts/r/fails",
            dag_id="obs_counts",
            run_id="r",
            task_id="fails",
            map_index=-1,
            args={},
            conf={},
            error="ValueError: boom",
            traceback=None,
            tries=1,
        )

        def alert(name: str, state: str) -> dict[str, Any] | None:
            return next(
                (
                    a
                    for a in _alerts(base)
                    if a["labels"]["alertname"] == name and a["state"] == state
                ),
                None,
            )

        sla = procs.wait_for(
            lambda: alert("BeatflowDagSlaMissed", "firing"),
            timeout=60,
            message="BeatflowDagSlaMissed to fire",
        )
        assert sla["labels"]["dag"] == "obs_sla"  # type: ignore[index]
        procs.wait_for(
            lambda: alert("BeatflowDeadLettersPresent", "pending"),
            timeout=60,
            message="BeatflowDeadLettersPresent to be pending",
        )
        assert _query(base, "beatflow_dead_letters") == [1.0]

        groups = _api(base, "rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) >= 8
        assert {r["health"] for r in rules} == {"ok"}, [r for r in rules if r["health"] != "ok"]
    finally:
        prometheus.stop()
        exporter.stop()
        store.close()
