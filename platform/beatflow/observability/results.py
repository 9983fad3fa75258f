"""The exporter's poll of the results database: DAG runs by state, dead letters, pools, asset
events and the runs they triggered, stuck task runs and SLA misses. Each SLA miss and each newly
stuck task run is reported once: a metric, a structured log event and (SLA) the DAG's
``on_sla_miss`` callback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from beatflow.dag.model import DAG
from beatflow.observability.detect import SlaMiss, StuckTaskRun, find_stuck, sla_miss
from beatflow.observability.metrics import Metrics
from beatflow.store.records import DAG_RUN_STATES, DagRunRecord

if TYPE_CHECKING:
    from prometheus_client import Counter

    from beatflow.store import Store

log = logging.getLogger(__name__)

RUNS_SCANNED = 1000  # newest DAG runs checked for SLA misses per poll, per state
REPORTED_MAX = 100_000


class ResultsPoller:
    """One ``poll()`` reads the database and updates the gauges; raises StoreError on failure
    (the caller marks the source down and retries)."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        *,
        dags: Callable[[], Mapping[str, DAG]],
        default_time_limit: float,
        first_report: Callable[[str], bool] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sla_lookback: timedelta = timedelta(days=1),
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.dags = dags
        self.default_time_limit = default_time_limit
        self.first_report = first_report or (lambda key: True)
        self.clock = clock
        self.sla_lookback = sla_lookback
        self._reported_sla: set[str] = set()
        self._stuck: set[str] = set()
        self._series: set[tuple[str, str]] = set()
        self._pools: set[str] = set()
        self._totals: dict[tuple[str, ...], int] = {}  # counters read as totals from the DB

    def poll(self) -> None:
        now = self.clock()
        self._count_runs()
        self.metrics.dead_letters.set(self.store.count_dead_letters())
        self._count_pools()
        self._count_assets()
        active = self.store.list_dag_runs(
            state="running", limit=RUNS_SCANNED
        ) + self.store.list_dag_runs(state="queued", limit=RUNS_SCANNED)
        self._check_stuck(active, now)
        recent = self.store.list_dag_runs(limit=RUNS_SCANNED)
        self._check_sla({(r.dag_id, r.run_id): r for r in [*recent, *active]}.values(), now)

    def _count_pools(self) -> None:
        seen = set()
        for pool in self.store.list_pools():
            for state, value in (("used", pool.used), ("queued", pool.queued), ("free", pool.free)):
                self.metrics.pool_slots.labels(pool=pool.name, state=state).set(value)
            seen.add(pool.name)
        for name in self._pools - seen:  # a deleted pool's series go
            for state in ("used", "queued", "free"):
                self.metrics.pool_slots.remove(name, state)
        self._pools = seen

    def _count_assets(self) -> None:
        """The asset counters follow the database's totals (each poll adds what is new), so
        every exporter replica, and one restarted, serves the same values."""
        m = self.metrics
        for dag in self.dags().values():  # zero series, so the first increase is visible
            if dag.asset_schedule is not None:
                m.asset_triggered_runs.labels(dag=dag.dag_id)
            for spec in dag.tasks.values():
                for asset in spec.outlets:
                    m.asset_events.labels(asset=asset, source="task")
        for (asset, source), total in self.store.asset_event_totals().items():
            self._follow(("event", asset, source), total, m.asset_events.labels(asset, source))
        for dag_id, total in self.store.asset_triggered_run_totals().items():
            self._follow(("run", dag_id), total, m.asset_triggered_runs.labels(dag=dag_id))

    def _follow(self, key: tuple[str, ...], total: int, counter: Counter) -> None:
        seen = self._totals.get(key, 0)
        if total > seen:
            counter.inc(total - seen)
            self._totals[key] = total

    def _count_runs(self) -> None:
        counts = self.store.count_dag_runs_by_state()
        dags = {d for d, _ in counts} | {d for d, _ in self._series}
        for dag in dags:
            for state in DAG_RUN_STATES:
                self.metrics.dag_runs_by_state.labels(dag=dag, state=state).set(
                    counts.get((dag, state), 0)
                )
                self._series.add((dag, state))

    # ------------------------------------------------------------------ stuck task runs

    def _check_stuck(self, active: list[DagRunRecord], now: datetime) -> None:
        dags = self.dags()
        found: dict[str, StuckTaskRun] = {}
        for run in active:
            if run.state != "running":
                continue
            for stuck in find_stuck(
                self.store.get_task_runs(run.dag_id, run.run_id),
                dags.get(run.dag_id),
                self.default_time_limit,
                now,
            ):
                found[stuck.dedupe_key] = stuck
        # runs beyond the scanned window still count through the store's own query
        lease_total = self.store.count_stuck_task_runs(now)
        lease_seen = sum(1 for s in found.values() if s.reason == "lease_expired")
        self.metrics.stuck_task_runs.set(len(found) + max(0, lease_total - lease_seen))
        for key, stuck in found.items():
            if key not in self._stuck:
                log.warning(
                    "task run %s is stuck (%s since %s, worker %s)",
                    key,
                    stuck.reason,
                    stuck.since.isoformat(),
                    stuck.worker or "unknown",
                    extra={
                        "event": "stuck_task_run",
                        "dag_id": stuck.dag_id,
                        "run_id": stuck.run_id,
                        "task_id": stuck.task_id,
                        "dedupe_key": key,
                        "reason": stuck.reason,
                        "worker": stuck.worker or "",
                    },
                )
        self._stuck = set(found)

    # ------------------------------------------------------------------ SLA misses

    def _check_sla(self, runs: Iterable[DagRunRecord], now: datetime) -> None:
        dags = self.dags()
        if len(self._reported_sla) > REPORTED_MAX:
            self._reported_sla.clear()  # the shared first_report still stops repeats
        for run in runs:
            dag = dags.get(run.dag_id)
            if dag is None or dag.sla is None:
                continue
            miss = sla_miss(dag, run, now, self.sla_lookback)
            if miss is None or miss.key in self._reported_sla:
                continue
            self._reported_sla.add(miss.key)
            if not self.first_report(miss.key):
                continue  # another exporter (or this one before a restart) reported it
            self._report_sla(dag, miss)

    def _report_sla(self, dag: DAG, miss: SlaMiss) -> None:
        self.metrics.sla_misses.labels(dag=miss.dag_id).inc()
        log.warning(
            "DAG run %s missed its SLA: not finished by %s (logical date %s + %s); state %s",
            miss.key,
            miss.deadline.isoformat(),
            miss.logical_date.isoformat(),
            dag.sla,
            miss.state,
            extra={
                "event": "sla_miss",
                "dag_id": miss.dag_id,
                "run_id": miss.run_id,
                "deadline": miss.deadline.isoformat(),
                "state": miss.state,
            },
        )
        if dag.on_sla_miss is None:
            return
        try:
            dag.on_sla_miss(
                dag_id=miss.dag_id,
                run_id=miss.run_id,
                logical_date=miss.logical_date,
                deadline=miss.deadline,
                state=miss.state,
            )
        except Exception:  # a user's callback must not stop the exporter
            log.exception(
                "on_sla_miss callback of DAG %s raised",
                miss.dag_id,
                extra={"dag_id": miss.dag_id, "run_id": miss.run_id},
            )
