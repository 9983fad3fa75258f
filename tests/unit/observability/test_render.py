"""The fast /metrics rendering says exactly what prometheus-client's generate_latest says."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from beatflow.observability.celery_events import EventHandler
from beatflow.observability.metrics import Metrics
from beatflow.observability.render import Renderer


def _parse(text: str) -> dict[tuple[str, str, frozenset[tuple[str, str]]], float]:
    return {
        (family.type, s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _filled() -> Metrics:
    m = Metrics()
    h = EventHandler(m)
    h.know_dags([("etl", ["load", 'ex"tract'])])
    h.handle({"type": "task-received", "uuid": "u", "name": 'etl.ex"tract', "hostname": "w\\1"})
    h.handle({"type": "task-succeeded", "uuid": "u", "hostname": "w\\1", "runtime": 0.3})
    h.handle(
        {
            "type": "task-failed",
            "uuid": "v",
            "name": "etl.load",
            "hostname": "w2\nx",
            "exception": "KeyError('k')",
        }
    )
    h.handle(
        {"type": "beatflow-dag-run-finished", "dag_id": "etl", "state": "failed", "duration": 75.5}
    )
    m.dead_letters.set(2)
    m.beat_leader.labels(instance="beat-1").set(1)
    m.beat_failovers.inc(3)
    m.queue_length.labels(queue_name="default").set(7)
    return m


def test_the_fast_rendering_has_the_same_samples_and_types_as_generate_latest() -> None:
    m = _filled()
    fast = Renderer(m.registry, m.all()).render().decode()
    reference = generate_latest(m.registry).decode()
    assert _parse(fast) == _parse(reference)
    assert len(_parse(fast)) > 50


def test_every_registered_metric_is_rendered() -> None:
    m = Metrics()
    names = {f.name for f in m.registry.collect()}
    rendered = {
        f.name
        for f in text_string_to_metric_families(Renderer(m.registry, m.all()).render().decode())
    }
    assert rendered == names
