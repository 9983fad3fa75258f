"""Task and DAG callbacks on a real worker: each called once, after its state is recorded, with
the context of its event; a callback that raises changes no state."""

from __future__ import annotations

from typing import Any

from tests import procs
from tests.integration.notify.conftest import Notified


def _one(notified: Notified, name: str, run_id: str) -> dict[str, Any]:
    """The one call of callback ``name`` for ``run_id`` (waited for: a DAG's callbacks run
    after its end is announced)."""

    def calls() -> list[dict[str, Any]]:
        return [c for c in notified.lines(name) if c["run_id"] == run_id]

    procs.wait_for(calls, timeout=30, message=f"callback {name} called for {run_id}")
    found = calls()
    assert len(found) == 1, found
    return found[0]


def test_each_callback_is_called_once_with_its_context_and_a_raising_one_changes_nothing(
    notified: Notified,
) -> None:
    c = notified.cluster
    run, tasks = c.run("n_callbacks", conf={"who": "ops"})
    assert run.state == "failed"
    assert {t: r.state for t, r in tasks.items()} == {
        "ok": "success",  # its second callback raises: logged, the task still succeeded
        "flaky": "success",
        "bad": "failed",
        "cleanup": "skipped",
        "quiet": "skipped",  # it raised Skip
    }
    rid = run.run_id

    ok = _one(notified, "ok-success", rid)
    assert (ok["event"], ok["dag_id"], ok["task_id"], ok["state"]) == (
        "success",
        "n_callbacks",
        "ok",
        "success",
    )
    assert ok["try_number"] == 1 and ok["conf"] == {"who": "ops"}
    assert ok["dedupe_key"] == f"n_callbacks/{rid}/ok"

    retry = _one(notified, "flaky-retry", rid)
    assert (retry["state"], retry["try_number"]) == ("up_for_retry", 1)
    assert retry["exception"] == "ConnectionError: the first try fails"
    assert _one(notified, "flaky-success", rid)["try_number"] == 2

    bad = _one(notified, "bad-failure", rid)
    assert (bad["event"], bad["state"]) == ("failure", "failed")
    assert bad["exception"] == "ValueError: bad on purpose"
    assert not [x for x in notified.lines("bad-success") if x["run_id"] == rid]

    skipped = _one(notified, "cleanup-skipped", rid)
    assert (skipped["event"], skipped["state"]) == ("skipped", "skipped")
    assert skipped["reason"]
    quiet = _one(notified, "quiet-skipped", rid)  # a task that skipped itself: its callback too
    assert (quiet["event"], quiet["reason"]) == ("skipped", "nothing to do today")

    dag = _one(notified, "n_callbacks-failure", rid)
    assert (dag["event"], dag["task_id"], dag["state"]) == ("failure", None, "failed")
    assert not [x for x in notified.lines("n_callbacks-success") if x["run_id"] == rid]
    assert "this callback fails on purpose" in c.log()
