"""The Grafana dashboard: valid JSON, unique panel ids, and every metric it queries is one the
exporter serves (so renaming a metric cannot silently blank a panel)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from beatflow.observability.metrics import Metrics
from beatflow.observability.render import Renderer

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy/grafana/beatflow.json"
_METRIC = re.compile(r"\b((?:celery|beatflow)_[a-z_]+)")


def _exprs(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def _served() -> set[str]:
    m = Metrics()
    m.task_runtime.labels(name="n", hostname="h", queue_name="q").observe(1)
    m.dag_run_duration.labels(dag="d").observe(1)
    text = Renderer(m.registry, m.all()).render().decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return (
        names
        | {f.name for f in m.registry.collect()}
        | {f"{f.name}_total" for f in m.registry.collect() if f.type == "counter"}
    )


def test_the_dashboard_is_valid_json_with_unique_panel_ids() -> None:
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert doc["uid"] == "beatflow-overview"
    assert len(_exprs(doc)) >= 20


def test_every_metric_the_dashboard_queries_is_served_by_the_exporter() -> None:
    doc = json.loads(DASHBOARD.read_text())
    used = {name for expr in _exprs(doc) for name in _METRIC.findall(expr)}
    used |= set(_METRIC.findall(json.dumps(doc["templating"])))
    assert used - _served() == set()
    for wanted in (
        "beatflow_dag_runs_total",
        "celery_queue_length",
        "celery_worker_up",
        "beatflow_beat_leader",
        "beatflow_sla_misses_total",
    ):
        assert wanted in used
