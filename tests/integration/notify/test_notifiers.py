"""Notifiers against real servers started by the test: a webhook's Slack-compatible POST, a mail
through SMTP, each sent once; a notifier that keeps failing is tried its number of times and
fails no task; a duplicated or redelivered event sends nothing more; an event whose message was
lost is sent by the reconciler's pass, once."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from beatflow.notify import callbacks, deliver, sweep
from beatflow.notify.base import event_key, make_context
from beatflow.runtime import runtime_of
from tests import procs
from tests.integration.notify.conftest import Notified


def _settled(notified: Notified, dag_id: str, run_id: str, count: int) -> list[Any]:
    """The outbox rows of a run once ``count`` of them have ended (sent or failed)."""
    store = notified.cluster.store

    def ended() -> bool:
        rows = store.list_notifications(dag_id, run_id)
        return sum(r.state in ("sent", "failed") for r in rows) >= count

    procs.wait_for(ended, timeout=60, message=f"{count} notifications of {run_id} ended")
    return store.list_notifications(dag_id, run_id)


def test_a_webhook_notifier_posts_once_per_event_a_slack_compatible_body(
    notified: Notified,
) -> None:
    run, tasks = notified.cluster.run("n_webhook")
    assert run.state == "success" and tasks["hello"].state == "success"
    rows = _settled(notified, "n_webhook", run.run_id, 2)
    assert sorted((r.state, r.kind, r.tries) for r in rows) == [
        ("sent", "success", 1),
        ("sent", "success", 1),
    ]
    [(headers, body)] = notified.hook.received("/task", run.run_id)
    assert headers["Authorization"] == "Bearer test-token"
    assert body["text"] == "[beatflow] n_webhook.hello success (try 1)"
    assert body["blocks"][0]["text"]["text"] == "n_webhook.hello is success"
    assert {"type": "mrkdwn", "text": "*Task*\nhello"} in body["blocks"][1]["fields"]
    assert body["beatflow"]["task_id"] == "hello"
    [(_h, dag_body)] = notified.hook.received("/dag", run.run_id)
    assert dag_body["beatflow"]["task_id"] is None
    assert dag_body["text"] == "[beatflow] n_webhook success"
    # the DAG's plain callback next to its notifier: once, with the run's context
    [dag_call] = [x for x in notified.lines("n_webhook-success") if x["run_id"] == run.run_id]
    assert (dag_call["event"], dag_call["state"]) == ("success", "success")
    assert dag_call["task_id"] is None

    # a duplicated event writes nothing and a redelivered message sends nothing
    runtime = runtime_of(notified.cluster.app)
    task_row = next(r for r in rows if r.payload["context"]["task_id"] == "hello")
    context = task_row.payload["context"]
    assert callbacks.enqueue(runtime, context, 0, None) is False
    assert deliver.deliver(runtime, task_row.event_key) == "duplicate"
    assert len(notified.hook.received("/task", run.run_id)) == 1


def test_a_smtp_notifier_mails_the_failure_once(notified: Notified) -> None:
    run, tasks = notified.cluster.run("n_mail")
    assert run.state == "failed" and tasks["breaks"].state == "failed"
    [row] = _settled(notified, "n_mail", run.run_id, 1)
    assert (row.state, row.kind) == ("sent", "failure"), row.error

    def mails() -> list[Any]:
        return [m for m in notified.mailbox.received() if run.run_id in m[2].get_content()]

    procs.wait_for(mails, timeout=30, message="the mail")
    [(sender, recipients, mail)] = mails()
    assert (sender, recipients) == ("beatflow@example.com", ["ops@example.com"])
    assert mail["Subject"] == "[beatflow] n_mail.breaks failed (try 1)"
    assert "error: ValueError: the warehouse is down" in mail.get_content()


def test_a_notifier_that_keeps_failing_is_tried_and_recorded_failed_and_the_task_succeeds(
    notified: Notified,
) -> None:
    run, tasks = notified.cluster.run("n_failing_notifier")
    assert run.state == "success" and tasks["hello"].state == "success"
    [row] = _settled(notified, "n_failing_notifier", run.run_id, 1)
    assert (row.state, row.tries) == ("failed", 2)
    assert row.error is not None and "answered 500" in row.error
    assert "/fail" not in row.error  # the URL's path (a chat webhook's secret) is not logged
    assert len(notified.hook.received("/fail", run.run_id)) == 2
    # the plain callback after the raising one and the failing notifier still ran
    assert [x["run_id"] for x in notified.lines("n_failing_notifier-success")].count(
        run.run_id
    ) == 1
    # an operator sees it where they look at a run
    env = {k: v for k, v in notified.cluster.env.items() if k != "BEATFLOW_TEST_MARKS"}
    shown = subprocess.run(
        [sys.executable, "-c", "import sys; from beatflow.cli import run; run(sys.argv[1:])",
         "runs", "show", "n_failing_notifier", run.run_id],
        env=procs.beatflow_env(env), capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "notify hello success (try 1, notifier 1): failed after 2 tries: " in shown
    assert "answered 500" in shown and "/fail" not in shown


def test_an_event_whose_message_was_lost_is_sent_by_the_reconciler_pass_once(
    notified: Notified, monkeypatch: Any
) -> None:
    runtime = runtime_of(notified.cluster.app)
    run_id = "lost-message"
    context = make_context(
        event="success", dag_id="n_webhook", run_id=run_id, state="success", task_id="hello",
        try_number=1,
    )  # fmt: skip
    key = event_key(context, 0)
    # the outbox row was written, then the worker died before publishing beatflow.notify
    assert runtime.store.add_notification(
        key, dag_id="n_webhook", run_id=run_id, kind="success",
        payload={"context": context, "index": 0},
    )  # fmt: skip
    monkeypatch.setattr(sweep, "RESEND_AFTER", sweep.RESEND_AFTER * 0)
    procs.wait_for(
        lambda: runtime.store.pending_notifications(sweep.utc_now()),
        timeout=5,
        message="the row to be older than now",
    )
    assert sweep.resend_pending(runtime) == 1
    procs.wait_for(
        lambda: notified.hook.received("/task", run_id), timeout=30, message="the resent event"
    )
    _settled(notified, "n_webhook", run_id, 1)  # recorded once the server answered
    row = runtime.store.get_notification(key)
    assert row is not None and row.state == "sent"
    assert sweep.resend_pending(runtime) == 0  # sent: nothing pending any more
    assert len(notified.hook.received("/task", run_id)) == 1


def test_events_whose_rows_a_killed_worker_never_wrote_are_written_and_sent_once(
    notified: Notified, monkeypatch: Any
) -> None:
    runtime = runtime_of(notified.cluster.app)
    store = runtime.store
    run_id = "killed-after-commit"
    # what a worker SIGKILLed right after committing the states leaves: final rows, no outbox
    store.create_dag_run("n_webhook", run_id)
    key = f"n_webhook/{run_id}/hello"
    claim = store.claim_task_run(key, dag_id="n_webhook", run_id=run_id, task_id="hello")
    assert store.finish_task_run(key, claim.token or "", state="success", result="hello")
    store.finish_dag_run("n_webhook", run_id, "success")
    assert store.list_notifications("n_webhook", run_id) == []

    monkeypatch.setattr(sweep, "RESEND_AFTER", sweep.RESEND_AFTER * 0)
    procs.wait_for(
        lambda: (
            sweep.enqueue_missing(runtime) >= 0
            and len(store.list_notifications("n_webhook", run_id)) == 2
        ),
        timeout=10,
        message="the task's and the run's events written",
    )
    assert sweep.enqueue_missing(runtime) == 0  # written once: nothing missing any more
    procs.wait_for(
        lambda: notified.hook.received("/task", run_id) and notified.hook.received("/dag", run_id),
        timeout=30,
        message="both events sent",
    )
    _settled(notified, "n_webhook", run_id, 2)
    assert len(notified.hook.received("/task", run_id)) == 1
    assert len(notified.hook.received("/dag", run_id)) == 1
    [(_h, body)] = notified.hook.received("/task", run_id)
    assert body["beatflow"]["try_number"] == 1 and body["beatflow"]["dedupe_key"] == key


def test_the_reconciler_finds_nothing_missing_for_events_the_workers_wrote(
    notified: Notified, monkeypatch: Any
) -> None:
    # the worker's event keys and the reconciler's are made alike: no event is written twice
    c = notified.cluster
    for dag_id, count in (("n_webhook", 2), ("n_mail", 1), ("n_failing_notifier", 1)):
        run, _tasks = c.run(dag_id)
        _settled(notified, dag_id, run.run_id, count)
    monkeypatch.setattr(sweep, "RESEND_AFTER", sweep.RESEND_AFTER * 0)
    assert sweep.enqueue_missing(runtime_of(c.app)) == 0
