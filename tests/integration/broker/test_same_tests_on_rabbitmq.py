"""The DAG, lifecycle and dedupe tests that touch the broker, run again with RabbitMQ as the
broker: each test here is the Redis test of the same name in its own module, given a cluster
whose broker is RabbitMQ (its Redis keeps only beatflow's state) and otherwise the settings of
that module's cluster. A map and its batched sends with their task-sent events, cancel with
terminate (a broadcast to the workers), a run the reconciler dispatches or resumes, a message
delivered twice, a dead letter replayed, and plain Idempotent tasks sent twice."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests import services
from tests.cluster import DAGS, Cluster, cluster
from tests.faults.runs import test_reconciler as reconciler
from tests.faults.runs.conftest import FAST_RECONCILER
from tests.integration.celery import test_plain_tasks as plain_tasks
from tests.integration.dag import test_dedupe as dedupe
from tests.integration.dag import test_running_dags as running
from tests.integration.runs import test_operator as operator

pytestmark = pytest.mark.slow


def _rabbit_cluster(
    request: pytest.FixtureRequest, name: str, env: Mapping[str, str], dags: Path = DAGS
) -> Iterator[Cluster]:
    redis_server: services.RedisServer = request.getfixturevalue("redis_server")
    postgres_server: services.PostgresServer = request.getfixturevalue("postgres_server")
    rabbit: services.RabbitServer = request.getfixturevalue("rabbitmq_server")
    tmp = request.getfixturevalue("tmp_path_factory").mktemp(name)
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    full = {**env, "BEATFLOW_BROKER_URL": rabbit.url, "BEATFLOW_REDIS_URL": redis_url}
    try:
        with cluster(tmp, redis_url, db_url, env=full, dags=dags) as c:
            with c.app.connection_for_write() as conn:
                assert conn.transport.driver_type == "amqp"
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)


@pytest.fixture(scope="module")
def rabbit(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """tests/integration/dag's and tests/integration/runs' cluster, on RabbitMQ."""
    yield from _rabbit_cluster(request, "rabbit", {})


@pytest.fixture(scope="module")
def rabbit_reconciling(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """tests/faults/runs' cluster (a fast reconciler), on RabbitMQ."""
    yield from _rabbit_cluster(request, "rabbit-reconciling", FAST_RECONCILER)


@pytest.fixture(scope="module")
def rabbit_plain(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """tests/integration/celery's cluster (plain tasks, Idempotent among them), on RabbitMQ."""
    env = {"BEATFLOW_IMPORTS": "billing"}
    yield from _rabbit_cluster(request, "rabbit-plain", env, plain_tasks.PLAIN_DAGS)


def test_a_mapped_task_fans_out_at_run_time_and_the_downstream_gets_the_list(rabbit):
    running.test_a_mapped_task_fans_out_at_run_time_and_the_downstream_gets_the_list(rabbit)


def test_a_wide_map_fans_in_without_a_chord_and_its_downstream_runs_once(rabbit):
    running.test_a_wide_map_fans_in_without_a_chord_and_its_downstream_runs_once(rabbit)


def test_a_maps_task_sent_events_reach_celerys_receiver_batched_per_chunk(rabbit):
    running.test_a_maps_task_sent_events_reach_celerys_receiver_batched_per_chunk(rabbit)


def test_a_failure_is_recorded_and_each_trigger_rule_decides_downstream(rabbit):
    running.test_a_failure_is_recorded_and_each_trigger_rule_decides_downstream(rabbit)


def test_cancel_terminates_the_running_task_frees_the_slot_and_is_audited(rabbit):
    operator.test_cancel_terminates_the_running_task_frees_the_slot_and_is_audited(rabbit)


def test_a_message_delivered_twice_runs_the_task_once(rabbit):
    dedupe.test_a_message_delivered_twice_runs_the_task_once(rabbit)


def test_a_dead_letter_replayed_after_a_fix_succeeds_under_the_same_dedupe_key(rabbit):
    dedupe.test_a_dead_letter_replayed_after_a_fix_succeeds_under_the_same_dedupe_key(rabbit)


def test_a_run_created_but_never_dispatched_is_dispatched_and_runs_once(rabbit_reconciling):
    reconciler.test_a_run_created_but_never_dispatched_is_dispatched_and_runs_once(
        rabbit_reconciling
    )


def test_a_map_whose_last_instance_ended_without_sending_what_follows_is_resumed(
    rabbit_reconciling,
):
    reconciler.test_a_map_whose_last_instance_ended_without_sending_what_follows_is_resumed(
        rabbit_reconciling
    )


def test_a_second_call_with_the_same_dedupe_key_returns_the_stored_result(rabbit_plain):
    plain_tasks.test_a_second_call_with_the_same_dedupe_key_returns_the_stored_result(rabbit_plain)


def test_a_redelivered_message_runs_the_body_once(rabbit_plain):
    plain_tasks.test_a_redelivered_message_runs_the_body_once(rabbit_plain)


def test_two_concurrent_calls_with_one_key_run_the_body_once(rabbit_plain):
    plain_tasks.test_two_concurrent_calls_with_one_key_run_the_body_once(rabbit_plain)
