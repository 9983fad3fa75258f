"""Every metric the exporter serves, in one place. Celery's own use celery-exporter's names and
labels (so existing dashboards work); beatflow's use the ``beatflow_`` prefix. Durations are in
seconds and every label is bounded (DAG, task, queue, worker, instance; never a run id)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

# ``*_created`` samples would double the series count and no dashboard uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

# celery-exporter's counters: Celery event type -> metric name (the registry adds ``_total``)
TASK_EVENT_COUNTERS = {
    "task-sent": ("celery_task_sent", "Sent when a task message is published."),
    "task-received": ("celery_task_received", "Sent when the worker receives a task."),
    "task-started": ("celery_task_started", "Sent just before the worker executes the task."),
    "task-succeeded": ("celery_task_succeeded", "Sent if the task executed successfully."),
    "task-failed": ("celery_task_failed", "Sent if the execution of the task failed."),
    "task-rejected": (
        "celery_task_rejected",
        "The task was rejected by the worker, possibly to be re-queued or dead-lettered.",
    ),
    "task-revoked": ("celery_task_revoked", "Sent if the task has been revoked."),
    "task-retried": (
        "celery_task_retried",
        "Sent if the task failed, but will be retried in the future.",
    ),
}
TASK_LABELS = ("name", "hostname", "queue_name")
SOURCES = ("events", "redis", "database")  # + "rabbitmq" when the broker is RabbitMQ

# Fewer buckets than the client's default 15: with one series per task and worker, every bucket
# costs thousands of samples per scrape at 1,000 DAGs.
TASK_RUNTIME_BUCKETS = (0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800)
DAG_RUN_BUCKETS = (5, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400)


class Metrics:
    """The metric objects of one exporter, registered on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.task_events: dict[str, Counter] = {}
        for event, (name, doc) in TASK_EVENT_COUNTERS.items():
            labels = (*TASK_LABELS, "exception") if event == "task-failed" else TASK_LABELS
            self.task_events[event] = Counter(name, doc, labels, registry=r)
        self.task_runtime = Histogram(
            "celery_task_runtime",
            "Histogram of task runtime measurements.",
            TASK_LABELS,
            buckets=TASK_RUNTIME_BUCKETS,
            registry=r,
        )
        self.worker_up = Gauge(
            "celery_worker_up",
            "Indicates if a worker has recently sent a heartbeat.",
            ["hostname"],
            registry=r,
        )
        self.worker_tasks_active = Gauge(
            "celery_worker_tasks_active",
            "The number of tasks the worker is currently processing",
            ["hostname"],
            registry=r,
        )
        self.queue_length = Gauge(
            "celery_queue_length",
            "Messages waiting in the broker queue, every priority sub-list included.",
            ["queue_name"],
            registry=r,
        )
        self.queue_backlog = Gauge(
            "beatflow_queue_backlog",
            "Work not done yet per queue: waiting in the broker + reserved by workers + running.",
            ["queue_name"],
            registry=r,
        )
        self.active_consumers = Gauge(
            "celery_active_consumer_count",
            "The number of active consumers in the broker queue (RabbitMQ only).",
            ["queue_name"],
            registry=r,
        )
        self.beat_leader = Gauge(
            "beatflow_beat_leader",
            "1 for the beat instance that holds the scheduler lock.",
            ["instance"],
            registry=r,
        )
        self.beat_failovers = Counter(
            "beatflow_beat_failovers",
            "Times the beat lock moved to another holder.",
            registry=r,
        )
        self.beat_loop_age = Gauge(
            "beatflow_beat_loop_age_seconds",
            "Seconds since each beat replica's tick loop last completed a pass (grows without "
            "bound when a beat is stuck; it hands the lease over past its stall timeout).",
            ["instance"],
            registry=r,
        )
        self.dag_runs_by_state = Gauge(
            "beatflow_dag_runs_by_state",
            "DAG runs in the results database by DAG and state.",
            ["dag", "state"],
            registry=r,
        )
        self.dag_runs = Counter(
            "beatflow_dag_runs",
            "DAG runs that finished, by final state (from worker events).",
            ["dag", "state"],
            registry=r,
        )
        self.dag_run_duration = Histogram(
            "beatflow_dag_run_duration_seconds",
            "Duration of finished DAG runs.",
            ["dag"],
            buckets=DAG_RUN_BUCKETS,
            registry=r,
        )
        self.task_runs = Counter(
            "beatflow_task_runs",
            "Task run outcomes (success, up_for_retry, up_for_reschedule, failed, skipped, "
            "upstream_failed).",
            ["dag", "task", "state"],
            registry=r,
        )
        self.reconciler_actions = Counter(
            "beatflow_reconciler_actions",
            "What the reconciler did to DAG runs: resumed (canvas re-sent), closed (closing step "
            "lost), failed (no progress after its resumes), timed_out (dagrun_timeout).",
            ["dag", "action"],
            registry=r,
        )
        self.callbacks = Counter(
            "beatflow_callbacks",
            "Callback and notifier outcomes: error (a callback raised), sent, failed (a "
            "notifier's tries ran out), duplicate (an event already sent or being sent).",
            ["dag", "event", "outcome"],
            registry=r,
        )
        self.duplicate_deliveries = Counter(
            "beatflow_duplicate_deliveries",
            "Messages for a task run that had already finished (not run again).",
            ["dag", "task"],
            registry=r,
        )
        self.dead_letters = Gauge(
            "beatflow_dead_letters",
            "Dead letters not replayed yet.",
            registry=r,
        )
        self.pool_slots = Gauge(
            "beatflow_pool_slots",
            "A pool's slots by state: used (held by running task runs), queued (wanted by task "
            "runs waiting for them), free (slots - used; negative after a shrink).",
            ["pool", "state"],
            registry=r,
        )
        self.asset_events = Counter(
            "beatflow_asset_events",
            "Asset events recorded in the results database, by asset and source: task (a "
            "producing task run's success) or external (beatflow assets emit, the API).",
            ["asset", "source"],
            registry=r,
        )
        self.asset_triggered_runs = Counter(
            "beatflow_asset_triggered_runs",
            "DAG runs created by asset events (data-aware scheduling), from the results database.",
            ["dag"],
            registry=r,
        )
        self.sla_misses = Counter(
            "beatflow_sla_misses",
            "DAG runs not finished by logical date + SLA.",
            ["dag"],
            registry=r,
        )
        self.stuck_task_runs = Gauge(
            "beatflow_stuck_task_runs",
            "Task runs still running past their time limit or with an expired lease.",
            registry=r,
        )
        self.source_up = Gauge(
            "beatflow_exporter_source_up",
            "1 while the exporter can read this source (events, redis, database).",
            ["source"],
            registry=r,
        )
        self.polls = Counter(
            "beatflow_exporter_polls",
            "Completed polls of a source (redis, database).",
            ["source"],
            registry=r,
        )
        self.events_seen = Counter(
            "beatflow_exporter_events",
            "Celery events processed by the exporter.",
            registry=r,
        )
        self.event_lag = Gauge(
            "beatflow_exporter_event_lag_seconds",
            "Seconds between the last processed event being sent and being processed.",
            registry=r,
        )
        for source in SOURCES:
            self.source_up.labels(source=source).set(0)

    def all(self) -> list[MetricWrapperBase]:
        """Every metric object, in registration order (what /metrics renders)."""
        return [v for v in vars(self).values() if isinstance(v, MetricWrapperBase)] + list(
            self.task_events.values()
        )
