"""The exporter process: follows Celery's event stream, polls the broker (queues, backlog: Redis,
or RabbitMQ through passive declares), Redis (beat leader) and the results database (runs, dead
letters, stuck task runs, SLA misses) on their own threads,
and serves ``/metrics`` and ``/healthz``. A source that fails is marked down by
``beatflow_exporter_source_up`` and retried; the process keeps serving."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from http.server import ThreadingHTTPServer

import redis
from celery import Celery

from beatflow import connections, keys
from beatflow.dag.loader import load_dags
from beatflow.dag.model import DAG
from beatflow.observability import broker, rabbitmq
from beatflow.observability.celery_events import EventFollower, EventHandler
from beatflow.observability.http import make_server
from beatflow.observability.metrics import Metrics
from beatflow.observability.render import Renderer
from beatflow.observability.results import ResultsPoller
from beatflow.queues import QueueLayout
from beatflow.runtime import runtime_of
from beatflow.store import Store

log = logging.getLogger(__name__)


def redis_client(url: str, timeout: float = 2.0) -> redis.Redis:
    """A redis-py client with short timeouts (a blip must not hang a poll)."""
    return connections.redis_client(url, timeout=timeout, decode_responses=False)


class Exporter:
    """Everything ``beatflow exporter`` runs; ``start()`` then ``serve()``/``stop()``.

    ``app`` comes from the composition root (:func:`beatflow.app.create_app`): its settings are
    the exporter's, its connection follows the event stream. ``stop()`` closes it."""

    def __init__(
        self,
        app: Celery,
        *,
        redis_interval: float = 5.0,
        db_interval: float = 15.0,
        worker_timeout: float = 10.0,
        dags_reload_interval: float = 60.0,
        load_dag_folder: bool = True,
    ) -> None:
        settings = runtime_of(app).settings
        self.settings = settings
        self.metrics = Metrics()
        self.redis_interval = redis_interval
        self.db_interval = db_interval
        self.dags_reload_interval = dags_reload_interval
        self.load_dag_folder = load_dag_folder
        self.app = app
        self.handler = EventHandler(
            self.metrics, default_queue=settings.default_queue, worker_timeout=worker_timeout
        )
        self.follower = EventFollower(self.app, self.handler)
        self.layout = QueueLayout.from_settings(settings)
        self.leader = broker.LeaderTracker()
        self._dags: Mapping[str, DAG] = {}
        self._dags_loaded_at = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._store: Store | None = None
        self._broker_redis: redis.Redis | None = None
        self._beat_redis: redis.Redis | None = None
        self._loop_age_instances: set[str] = set()
        self._server: ThreadingHTTPServer | None = None
        self._poller: ResultsPoller | None = None
        self.rabbitmq = rabbitmq.QueueReader(app) if settings.broker_is_amqp else None
        self.sources = ("events", "redis", "database") + (("rabbitmq",) if self.rabbitmq else ())
        if self.rabbitmq is not None:
            self.metrics.source_up.labels(source="rabbitmq").set(0)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._reload_dags()
        self.follower.start()
        self._spawn("beatflow-redis-poll", self.redis_interval, self.poll_redis, "redis")
        if self.rabbitmq is not None:
            self._spawn(
                "beatflow-rabbitmq-poll", self.redis_interval, self.poll_rabbitmq, "rabbitmq"
            )
        self._spawn("beatflow-db-poll", self.db_interval, self.poll_database, "database")

    def serve(self, host: str = "0.0.0.0", port: int | None = None) -> ThreadingHTTPServer:
        """Start the HTTP server on a thread; return it (``server_address`` has the port)."""
        self._server = make_server(
            Renderer(self.metrics.registry, self.metrics.all()).render,
            self.health,
            host,
            self.settings.metrics_port if port is None else port,
        )
        thread = threading.Thread(
            target=self._server.serve_forever, name="beatflow-http", daemon=True
        )
        thread.start()
        return self._server

    def stop(self) -> None:
        self._stop.set()
        self.follower.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(5)
        if self.rabbitmq is not None:
            self.rabbitmq.close()
        if self._store is not None:
            self._store.close()
        self.app.close()

    def wait(self) -> None:
        while not self._stop.wait(1.0):
            pass

    def health(self) -> tuple[bool, dict[str, object]]:
        threads = [self.follower.is_alive(), *(t.is_alive() for t in self._threads)]
        registry = self.metrics.registry
        sources = {
            s: int(registry.get_sample_value("beatflow_exporter_source_up", {"source": s}) or 0)
            for s in self.sources
        }
        return all(threads), {"threads_alive": all(threads), "sources": sources}

    def _spawn(self, name: str, interval: float, poll: Callable[[], None], source: str) -> None:
        thread = threading.Thread(
            target=self._loop, args=(interval, poll, source), name=name, daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _loop(self, interval: float, poll: Callable[[], None], source: str) -> None:
        up = self.metrics.source_up.labels(source=source)
        polls = self.metrics.polls.labels(source=source)
        down_since: float | None = None
        last_log = 0.0
        while not self._stop.is_set():
            try:
                poll()
                if down_since is not None:
                    log.info(
                        "%s is reachable again",
                        source,
                        extra={"event": "source_up", "source": source},
                    )
                down_since = None
                up.set(1)
                polls.inc()
            except Exception as exc:  # noqa: BLE001 - a blip must never end the exporter
                up.set(0)
                now = time.monotonic()
                if down_since is None or now - last_log > 60:
                    log.warning(
                        "cannot read %s: %s; retrying every %.1fs",
                        source,
                        exc,
                        interval,
                        extra={"event": "source_down", "source": source},
                    )
                    last_log = now
                down_since = down_since or now
            self._stop.wait(interval)

    # ------------------------------------------------------------------ Redis

    def poll_redis(self) -> None:
        self.handler.sweep_workers()
        if self.rabbitmq is None:
            self._poll_redis_queues()
        self._poll_leader()

    def poll_rabbitmq(self) -> None:
        """Queue gauges from RabbitMQ: ready messages (passive declare), consumers, and the
        backlog as ready + held by workers (from events; AMQP does not count unacked)."""
        assert self.rabbitmq is not None
        readings = self.rabbitmq.read(self.settings.queues)
        flying = self.handler.in_flight()
        for queue, reading in readings.items():
            self.metrics.queue_length.labels(queue_name=queue).set(reading.messages)
            self.metrics.active_consumers.labels(queue_name=queue).set(reading.consumers)
            self.metrics.queue_backlog.labels(queue_name=queue).set(
                reading.messages + flying.get(queue, 0)
            )

    def _poll_redis_queues(self) -> None:
        if self._broker_redis is None:
            self._broker_redis = redis_client(self.settings.broker_url)
        client = self._broker_redis
        queues = self.settings.queues
        lengths = broker.queue_lengths(client, self.layout, queues)
        flying = broker.in_flight(client, self.layout)
        for queue in queues:
            self.metrics.queue_length.labels(queue_name=queue).set(lengths[queue])
            self.metrics.queue_backlog.labels(queue_name=queue).set(
                lengths[queue] + flying.get(queue, 0)
            )

    def _beat_client(self) -> redis.Redis:
        if self._beat_redis is None:
            url = self.settings.effective_redbeat_url
            if url == self.settings.broker_url and self._broker_redis is not None:
                self._beat_redis = self._broker_redis
            else:
                self._beat_redis = redis_client(url)
        return self._beat_redis

    def _poll_leader(self) -> None:
        from beatflow.scheduler.status import read_replicas

        live = set()
        for replica in read_replicas(self._beat_client()):
            instance, age = str(replica.get("instance")), replica.get("loop_age_seconds")
            if age is not None:
                self.metrics.beat_loop_age.labels(instance=instance).set(age)
                live.add(instance)
        for gone in self._loop_age_instances - live:
            self.metrics.beat_loop_age.remove(gone)
        self._loop_age_instances = live
        reading = broker.read_leader(self._beat_client())
        gauges, failovers = self.leader.observe(reading)
        for instance, value in gauges.items():
            self.metrics.beat_leader.labels(instance=instance).set(value)
        if failovers:
            self.metrics.beat_failovers.inc(failovers)
            log.warning(
                "beat failover: leadership moved %d time(s); leader now %s",
                failovers,
                reading.instance or "none",
                extra={
                    "event": "beat_failover",
                    "instance": reading.instance or "",
                    "epoch": reading.epoch,
                },
            )

    def first_sla_report(self, key: str) -> bool:
        """True the first time any exporter reports ``key`` (a shared set in Redis); True too
        when Redis cannot say (better a repeat than a silent miss)."""
        try:
            client = self._beat_client()
            now = time.time()
            pipe = client.pipeline(transaction=False)
            pipe.zadd(keys.SLA_REPORTED, {key: now}, nx=True)
            pipe.zremrangebyscore(keys.SLA_REPORTED, "-inf", now - 7 * 86400)
            added, _ = pipe.execute()
            return bool(added)
        except (redis.RedisError, ValueError):
            return True

    # ------------------------------------------------------------------ database

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.from_settings(self.settings)
        return self._store

    def _reload_dags(self) -> None:
        if not self.load_dag_folder:
            return
        bag = load_dags(self.settings.dags_folder)
        self._dags = dict(bag.dags)
        self._dags_loaded_at = time.monotonic()
        self.handler.know_dags((d.dag_id, list(d.tasks)) for d in self._dags.values())

    def dags(self) -> Mapping[str, DAG]:
        return self._dags

    def poll_database(self) -> None:
        if time.monotonic() - self._dags_loaded_at > self.dags_reload_interval:
            self._reload_dags()
        if self._poller is None:
            self._poller = ResultsPoller(
                self.store,
                self.metrics,
                dags=self.dags,
                default_time_limit=float(self.settings.task_time_limit),
                first_report=self.first_sla_report,
            )
        self._poller.poll()
