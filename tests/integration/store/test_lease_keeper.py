"""The lease renewer against a real store: a lease that ends because its holder recorded the
outcome goes quietly; one taken over by another worker is reported, once."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from beatflow.execution.lease import LeaseKeeper, ended_meanwhile
from beatflow.store import Store
from tests.procs import wait_for

WARNING = "was taken over by another worker"


def _claimed(store: Store, run_id: str) -> tuple[str, str]:
    store.create_dag_run("etl", run_id)
    key = f"etl/{run_id}/t"
    claim = store.claim_task_run(key, dag_id="etl", run_id=run_id, task_id="t")
    assert claim.token is not None
    return key, claim.token


def _expiry(store: Store, key: str) -> object:
    row = store.get_task_run(key)
    return None if row is None else row.lease_expires_at


def _held(keeper: LeaseKeeper, key: str) -> bool:
    with keeper._lock:
        return key in keeper._held


def _stop(keeper: LeaseKeeper) -> None:
    keeper._wake.set()
    if keeper._thread is not None:
        keeper._thread.join(timeout=10)
        assert not keeper._thread.is_alive()


def test_a_lease_ended_by_its_holders_own_write_goes_without_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key, token = _claimed(store, "r1")
    keeper = LeaseKeeper(store.renew_lease, 0.15)  # renews every 0.05 s
    try:
        claimed = store.get_task_run(key)
        assert claimed is not None
        keeper.hold(key, token)
        wait_for(lambda: _expiry(store, key) != claimed.lease_expires_at, timeout=10)  # renewing
        caplog.set_level(logging.WARNING, logger="beatflow.execution.lease")
        keeper.writing(key)
        assert store.finish_task_run(key, token, state="success", result=1)
        # the next renewal fails (the success cleared the lease) and lets the lease go: no
        # warning, though the holder has not released it yet
        wait_for(lambda: not _held(keeper, key), timeout=10)
        keeper.release(key)
    finally:
        _stop(keeper)
    assert WARNING not in caplog.text


def test_a_lease_taken_over_is_reported_once_and_let_go(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key, token = _claimed(store, "r2")
    keeper = LeaseKeeper(store.renew_lease, 0.15)
    caplog.set_level(logging.WARNING, logger="beatflow.execution.lease")
    try:
        keeper.hold(key, token)
        with store._engine.begin() as conn:  # another worker's claim after an expiry
            conn.execute(
                sa.text("UPDATE task_runs SET lease_token = 'theirs' WHERE dedupe_key = :k"),
                {"k": key},
            )
        # the renewer lets the lease go, then reports it: wait for both, then stop the renewer
        # so that a second report, were there one, would have been made before the count
        wait_for(lambda: not _held(keeper, key) and WARNING in caplog.text, timeout=10)
    finally:
        _stop(keeper)
    assert caplog.text.count(WARNING) == 1


def test_a_lease_dropped_by_a_cancel_is_reported_as_the_cancel_not_as_a_takeover(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key, token = _claimed(store, "r3")
    why = lambda k: ended_meanwhile(store.get_task_run(k))  # noqa: E731 - as the app builds it
    keeper = LeaseKeeper(store.renew_lease, 0.15, why_lost=why)
    caplog.set_level(logging.WARNING, logger="beatflow.execution.lease")
    try:
        keeper.hold(key, token)
        store.cancel_task_runs("etl", "r3", reason="cancelled by user:ann: not today")
        said = f"lease on task run {key} lost: it ended meanwhile as cancelled (cancelled by"
        wait_for(lambda: said in caplog.text, timeout=10)
    finally:
        _stop(keeper)
    assert "user:ann: not today); its outcome will not be recorded" in caplog.text
    assert WARNING not in caplog.text
