"""A fast Prometheus text rendering of our own metrics. prometheus-client's ``generate_latest``
builds a Sample object and re-escapes every label of every sample on each scrape (~15 µs a
sample: 2 s for 1,000 DAGs' series); here each child's label string is escaped once and cached,
and values are read straight from the children. It reads prometheus-client's (0.20+) internals,
so any surprise falls back to ``generate_latest``; a unit test compares both outputs. A custom
Collector yielding ``*MetricFamily`` (the public API) was measured 12x slower: it goes through
``generate_latest`` all the same (bench/RESULTS.md, "render.py against a public-API Collector")."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    if value == 0:
        return "0.0"
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


class Renderer:
    """Renders ``metrics`` (Counter, Gauge, Histogram objects of one registry) as text."""

    def __init__(self, registry: CollectorRegistry, metrics: Iterable[Any]) -> None:
        self.registry = registry
        self.metrics = list(metrics)
        self._lines: dict[tuple[int, tuple[str, ...]], list[str]] = {}
        self._broken = False

    def render(self) -> bytes:
        if not self._broken:
            try:
                return self._render().encode()
            except (AttributeError, TypeError, KeyError) as exc:
                self._broken = True
                log.warning("fast /metrics rendering failed (%r); using generate_latest", exc)
        return generate_latest(self.registry)

    def _prefixes(self, metric: Any, kind: str, values: tuple[str, ...]) -> list[str]:
        """The text before each value of one child, escaped once and cached."""
        key = (id(metric), values)
        cached = self._lines.get(key)
        if cached is not None:
            return cached
        body = ",".join(
            f'{n}="{_escape(v)}"' for n, v in zip(metric._labelnames, values, strict=True)
        )
        labels = f"{{{body}}}" if body else ""
        name = metric._name
        if kind == "counter":
            cached = [f"{name}_total{labels} "]
        elif kind == "gauge":
            cached = [f"{name}{labels} "]
        else:
            prefix = f"{body}," if body else ""
            cached = [
                f'{name}_bucket{{{prefix}le="{_number(bound)}"}} ' for bound in metric._upper_bounds
            ]
            cached += [f"{name}_count{labels} ", f"{name}_sum{labels} "]
        self._lines[key] = cached
        return cached

    def _children(self, metric: Any) -> list[tuple[tuple[str, ...], Any]]:
        if not metric._labelnames:
            return [((), metric)]
        with metric._lock:
            return list(metric._metrics.items())

    def _render(self) -> str:
        out: list[str] = []
        add = out.append
        for metric in self.metrics:
            name = metric._name
            doc = metric._documentation.replace("\\", r"\\").replace("\n", r"\n")
            if isinstance(metric, Counter):
                full, kind = f"{name}_total", "counter"
            elif isinstance(metric, Gauge):
                full, kind = name, "gauge"
            elif isinstance(metric, Histogram):
                full, kind = name, "histogram"
            else:
                raise TypeError(f"cannot render {type(metric).__name__}")
            add(f"# HELP {full} {doc}\n# TYPE {full} {kind}\n")
            for values, child in self._children(metric):
                lines = self._prefixes(metric, kind, values)
                if kind != "histogram":
                    add(f"{lines[0]}{_number(child._value.get())}\n")
                    continue
                total = 0.0
                for line, bucket in zip(lines, child._buckets, strict=False):
                    total += bucket.get()
                    add(f"{line}{_number(total)}\n")
                add(f"{lines[-2]}{_number(total)}\n")
                add(f"{lines[-1]}{_number(child._sum.get())}\n")
        return "".join(out)
