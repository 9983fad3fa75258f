"""The beat leader's asset pass (data-aware scheduling): record the asset events of producing
task runs' successes, then create the run of every DAG scheduled on assets whose condition its
unconsumed events meet, in one fenced transaction with their consumption
(``store.create_asset_run``), and have a worker dispatch it (``beatflow.dispatch_queued``).

Failover-safe by construction: an event's key derives from the task run's dedupe key and try,
so a new leader that scans the same successes records nothing twice; a run and the consumption
of its events commit together or not at all, and an event consumed once by a DAG is never
consumed by it again (primary key). A leader killed between the commit and the send leaves a
queued run, which the next leader's pass (or the reconciler) dispatches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from beatflow.dag.assets import Condition
from beatflow.dag.loader import DagBag
from beatflow.dag.model import DAG
from beatflow.errors import ConfError
from beatflow.store import Store
from beatflow.store.assets import AssetEventRecord
from beatflow.store.records import TRIGGER_ASSET, ScheduledRunDraft

log = logging.getLogger(__name__)

# a new leader looks this far back for producing successes whose events are not recorded
FIRST_SCAN = timedelta(days=1)
# later passes look back to their previous pass's start, less this (a success committed late)
SLACK = timedelta(seconds=120)
# at most this many of a run's triggering events are listed in its conf
LISTED_EVENTS = 100
# producers' workers record their events themselves: the leader's scan of their successes is
# the net for a worker killed between its commit and that write, so it runs this seldom
SCAN_EVERY = timedelta(seconds=10)


def asset_run_id(events: Collection[AssetEventRecord]) -> str:
    """``asset__<newest event id>``: an event is consumed once per DAG, so never reused."""
    return f"asset__{max(e.id for e in events)}"


def asset_draft(dag: DAG, events: list[AssetEventRecord], now: datetime) -> ScheduledRunDraft:
    """The run the events trigger: its conf the DAG's defaults and ``asset_events``, the
    triggering events (failed with the reason when the params need a conf)."""
    reason: str | None = None
    try:
        conf = dag.resolve_conf(None)
    except ConfError as exc:
        conf, reason = {}, f"the asset-triggered run cannot start: {exc}"
    conf["asset_events"] = [e.to_json() for e in events[-LISTED_EVENTS:]]
    return ScheduledRunDraft(dag.dag_id, asset_run_id(events), now, TRIGGER_ASSET, conf, reason)


def producers_of(bag: DagBag) -> dict[tuple[str, str], tuple[str, ...]]:
    """(dag_id, task_id) -> the assets its success updates."""
    return {
        (dag.dag_id, spec.task_id): spec.outlets
        for dag in bag.dags.values()
        for spec in dag.tasks.values()
        if spec.outlets
    }


def consumers_of(bag: DagBag) -> dict[str, Condition]:
    """dag_id -> its asset condition, for the DAGs scheduled on assets."""
    return {d.dag_id: d.asset_schedule for d in bag.dags.values() if d.asset_schedule is not None}


class AssetPass:
    """The leader's asset work, once a loop (``run``); ``reset`` on a new term."""

    def __init__(self, store: Callable[[], Store], dispatch: Callable[[list[str]], None]) -> None:
        self._store = store
        self._dispatch = dispatch
        self._since: datetime | None = None

    def reset(self) -> None:
        self._since = None

    def run(
        self, bag: DagBag, epoch: int, now: datetime, paused: Callable[[], Collection[str]]
    ) -> list[str]:
        """Record the events of producers' successes no worker recorded (every SCAN_EVERY)
        and create the due asset-triggered runs; the DAGs given a new run (sent to be
        dispatched)."""
        consumers = consumers_of(bag)
        producers = producers_of(bag)
        if not consumers and not producers:
            return []
        store = self._store()
        if self._since is None or now - self._since >= SCAN_EVERY:
            self._scan(store, producers, now)
        created: list[str] = []
        stopped = set(paused()) if consumers else set()
        for dag_id, condition in sorted(consumers.items()):
            if dag_id in stopped:
                continue
            events = store.unconsumed_asset_events(dag_id, condition.names())
            if not events or not condition.met({e.asset for e in events}):
                continue
            draft = asset_draft(bag.get(dag_id), events, now)
            run = store.create_asset_run(draft, [e.id for e in events], leader_epoch=epoch)
            if run is not None:
                created.append(dag_id)
                log.info(
                    "beat: DAG %s triggered by %d asset event(s) as run %s",
                    dag_id,
                    len(events),
                    run.run_id,
                    extra={"dag_id": dag_id, "run_id": run.run_id},
                )
        if created:
            self._dispatch(created)
        return created

    def _scan(
        self, store: Store, producers: dict[tuple[str, str], tuple[str, ...]], now: datetime
    ) -> None:
        since = now - FIRST_SCAN if self._since is None else self._since - SLACK
        updates = store.produced_updates(list(producers), since) if producers else []
        if updates:
            made = store.record_produced_events(
                (u, producers[(u.dag_id, u.task_id)]) for u in updates
            )
            if made:
                log.info("beat: recorded %d asset event(s) of producing tasks", made)
        self._since = now
