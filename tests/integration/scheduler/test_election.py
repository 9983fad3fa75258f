"""The leader election, the fenced schedule writes and the eviction-policy check, in-process
against a real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from beatflow import keys
from beatflow.dag.schedule import Schedule
from beatflow.scheduler.checks import check_eviction_policy
from beatflow.scheduler.election import LeaderElection
from beatflow.scheduler.plan import ScheduleSpec
from beatflow.scheduler.status import read_replicas
from beatflow.scheduler.sync import write_entries
from tests import services
from tests.procs import wait_for


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=1)
    yield c
    c.close()


def election(client: redis.Redis, name: str) -> LeaderElection:
    return LeaderElection(client, instance=name, ttl=1.5, renew_every=0.2)


def test_exactly_one_of_two_replicas_leads_and_the_epoch_counts_acquisitions(
    client: redis.Redis,
) -> None:
    changes: dict[str, list[tuple[bool, int]]] = {"a": [], "b": []}

    def replica(name: str) -> LeaderElection:
        return LeaderElection(
            client,
            instance=name,
            ttl=1.5,
            renew_every=0.2,
            on_change=lambda leader, epoch: changes[name].append((leader, epoch)),
        )

    a, b = replica("a"), replica("b")
    a.start()
    b.start()
    try:
        assert a.is_leader() and not b.is_leader()
        assert a.epoch == 1
        # renewals seen in a's heartbeat as leader over more than a lease (the lock would have
        # lapsed without them): a count of events, not a span of sleeps; load only slows it
        renewals: set[float] = set()

        def renewed_past_a_lease() -> bool:
            record = json.loads(client.get(keys.replica_key("a")) or "{}")
            if record.get("role") == "leader":
                renewals.add(record["seen"])
            return len(renewals) >= 5 and max(renewals) - min(renewals) > 1.5 * a.ttl

        wait_for(renewed_past_a_lease, timeout=30.0, message="a to renew its lease")
        assert changes == {"a": [(True, 1)], "b": []}  # the lease never changed hands
        assert client.get(keys.LOCK) == a.token and client.get(keys.EPOCH) == "1"
        wait_for(lambda: a.is_leader() and not b.is_leader(), message="a to lead, b to follow")
    finally:
        a.stop()
        b.stop()


def test_a_released_lock_is_taken_by_the_standby_within_one_renew_interval(
    client: redis.Redis,
) -> None:
    a, b = election(client, "a"), election(client, "b")
    a.start()
    b.start()
    try:
        a.stop(release=True)
        assert client.get(keys.LOCK) is None  # released at once, not left to expire
        wait_for(b.is_leader, timeout=30.0, message="b to lead")
        assert b.epoch == 2
    finally:
        b.stop()


def test_a_leader_that_loses_the_lock_steps_down_and_keeps_competing(client: redis.Redis) -> None:
    changes: list[tuple[bool, int]] = []  # every step down and take over, in order
    a = LeaderElection(
        client,
        instance="a",
        ttl=1.5,
        renew_every=0.2,
        on_change=lambda leader, epoch: changes.append((leader, epoch)),
    )
    a.start()
    try:
        assert a.is_leader() and changes == [(True, 1)]
        client.set(keys.LOCK, "someone-else", px=600)  # another beat got it (e.g. a split)
        # a steps down, then the thief's lease expires and a takes over again by itself with a
        # new epoch; the recorded changes show both, however late a poll would have looked
        wait_for(lambda: len(changes) >= 3, message="a to step down and lead again")
        assert changes == [(True, 1), (False, 1), (True, 2)]
        assert a.is_leader() and a.epoch == 2 and client.get(keys.LOCK) == a.token
    finally:
        a.stop()


def test_a_leader_whose_tick_loop_stalls_hands_the_lock_over_and_competes_only_once_it_moves(
    client: redis.Redis,
) -> None:
    a = LeaderElection(client, instance="a", ttl=1.5, renew_every=0.2, stall_timeout=1.0)
    b = election(client, "b")
    a.start()
    b.start()
    try:
        assert a.is_leader()
        a.mark_progress()
        a.step()  # a loop that moves keeps its lease
        assert a.is_leader()
        # the loop stops completing passes (a hung DB call, a hung import) while the election
        # thread lives on: a releases the lock instead of renewing it, b takes over
        wait_for(b.is_leader, timeout=30.0, message="b to take over from the stalled leader")
        assert not a.is_leader()
        assert [r["stalled"] for r in read_replicas(client) if r["instance"] == "a"] == [True]
        b.stop(release=True)
        a.step()  # still stalled: a does not take the free lock back
        assert not a.is_leader() and client.get(keys.LOCK) is None
        a.mark_progress()
        a.step()  # the loop moves again: a competes and wins
        assert a.is_leader() and a.epoch == 3
    finally:
        a.stop()
        b.stop()


def test_only_the_lock_holder_writes_schedule_entries(client: redis.Redis) -> None:
    spec = ScheduleSpec(
        "d1", Schedule.parse(timedelta(seconds=5), Schedule().timezone), None, None, False, 1
    )
    now = datetime.now(UTC)
    client.set(keys.LOCK, "leader-token", px=5000)
    assert not write_entries(client, "stale-token", {"d1": spec}, now).applied
    assert client.hgetall(keys.FINGERPRINTS) == {}
    result = write_entries(client, "leader-token", {"d1": spec}, now)
    assert result.applied and result.written == 1
    assert client.zscore(keys.SCHEDULE, keys.entry_key("d1")) is not None
    again = write_entries(client, "leader-token", {"d1": spec}, now)
    assert again.written == 0 and again.unchanged == 1  # idempotent
    gone = write_entries(client, "leader-token", {}, now)
    assert gone.removed == 1 and not client.exists(keys.entry_key("d1"))


def test_an_evicting_redis_policy_is_reported_with_the_fix() -> None:
    server = services.start_redis_server()
    try:
        c = redis.Redis.from_url(server.url, decode_responses=True)
        assert check_eviction_policy(c) is None
        c.config_set("maxmemory-policy", "allkeys-lru")
        message = check_eviction_policy(c)
        assert message is not None and "noeviction" in message and "allkeys-lru" in message
        c.close()
    finally:
        server.close()


def test_epochs_keep_growing_when_redis_loses_the_epoch_counter(client: redis.Redis) -> None:
    a = election(client, "a")
    a.epoch_floor = 41  # the newest DAG run in the results DB was fired by epoch 41
    a.start()
    try:
        assert a.epoch == 42
        client.flushdb()  # Redis restarted empty: lock and counter gone
        wait_for(lambda: a.is_leader() and a.epoch == 43, message="a to lead again with epoch 43")
    finally:
        a.stop()
