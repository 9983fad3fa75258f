"""The operator's asset verbs, shared by the CLI, the API and the web UI: emit an event of an
asset from outside (audited), and the lineage of every asset (its producers, its consumers, its
latest events) read from the loaded DAGs and the results DB."""

from __future__ import annotations

import logging
from typing import Any

from beatflow.dag.assets import name_problem
from beatflow.dag.loader import DagBag
from beatflow.errors import BeatflowError
from beatflow.runtime import Runtime
from beatflow.store.assets import AssetEventRecord
from beatflow.store.records import AuditNote

log = logging.getLogger(__name__)


class AssetNameError(BeatflowError):
    """A bad asset name given to a verb."""


def emit_asset(
    runtime: Runtime,
    name: str,
    *,
    extra: dict[str, Any] | None = None,
    actor: str,
    reason: str = "",
) -> AssetEventRecord:
    """Record an update of asset ``name`` from outside (the beat leader's next pass triggers
    its consumers), with the audit record of who did it, in one transaction."""
    problem = name_problem(name)
    if problem is not None:
        raise AssetNameError(f"{problem}; e.g. warehouse.orders")
    note = AuditNote(actor, "asset_emit", {"reason": reason, "asset": name})
    event = runtime.store.emit_asset_event(name, extra=extra, audit=note)
    log.info("asset %s updated by %s (event %d)", name, actor, event.id)
    return event


def lineage(bag: DagBag) -> dict[str, dict[str, list[str]]]:
    """asset -> {"producers": ["dag_id.task_id", ...], "consumers": ["dag_id", ...]}."""
    out: dict[str, dict[str, list[str]]] = {}

    def entry(name: str) -> dict[str, list[str]]:
        return out.setdefault(name, {"producers": [], "consumers": []})

    for dag in sorted(bag.dags.values(), key=lambda d: d.dag_id):
        for spec in dag.tasks.values():
            for name in spec.outlets:
                entry(name)["producers"].append(f"{dag.dag_id}.{spec.task_id}")
        if dag.asset_schedule is not None:
            for name in sorted(dag.asset_schedule.names()):
                entry(name)["consumers"].append(dag.dag_id)
    return out


def asset_consumers(bag: DagBag) -> dict[str, list[str]]:
    """asset -> the DAGs scheduled on it (what ``db prune`` waits for before it deletes an
    event of the asset)."""
    return {name: links["consumers"] for name, links in lineage(bag).items()}


def assets_overview(runtime: Runtime, *, events: int = 5) -> list[dict[str, Any]]:
    """Every asset the DAGs name or the DB has events of: producers, consumers, event count
    and the ``events`` newest events (with the runs that consumed each)."""
    links = lineage(runtime.dagbag)
    counts = runtime.store.asset_event_counts()
    return [
        asset_detail(runtime, name, links.get(name), counts.get(name, (0, 0))[0], events=events)
        for name in sorted(set(links) | set(counts))
    ]


def asset_detail(
    runtime: Runtime,
    name: str,
    links: dict[str, list[str]] | None = None,
    count: int | None = None,
    *,
    events: int = 20,
) -> dict[str, Any]:
    """One asset as ``assets_overview`` shows it."""
    if links is None:
        links = lineage(runtime.dagbag).get(name, {"producers": [], "consumers": []})
    recent = runtime.store.list_asset_events(name, limit=events) if events else []
    consumed = runtime.store.asset_consumers_of([e.id for e in recent])
    if count is None:
        count = runtime.store.asset_event_counts().get(name, (0, 0))[0]
    return {
        "name": name,
        "producers": links["producers"],
        "consumers": links["consumers"],
        "event_count": count,
        "events": [
            {
                **e.to_json(),
                "consumed_by": [{"dag_id": d, "run_id": r} for d, r in consumed.get(e.id, [])],
            }
            for e in recent
        ],
    }
