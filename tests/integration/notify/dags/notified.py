"""Test DAGs for callbacks and notifiers. Plain callbacks append their context as a JSON line
to a file under BEATFLOW_TEST_MARKS; notifiers post to the test's HTTP server
(NOTIFY_TEST_WEBHOOK) and mail through its SMTP server (NOTIFY_TEST_SMTP_PORT)."""

import json
import os
from pathlib import Path

from beatflow import DAG, Skip, SmtpNotifier, WebhookNotifier, task

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))
WEBHOOK = os.environ.get("NOTIFY_TEST_WEBHOOK", "http://127.0.0.1:9")
SMTP_PORT = int(os.environ.get("NOTIFY_TEST_SMTP_PORT", "25"))


def record(name):
    """A callback that appends its context to ``<name>.jsonl``."""

    def callback(context):
        MARKS.mkdir(parents=True, exist_ok=True)
        with open(MARKS / f"{name}.jsonl", "a") as f:
            f.write(json.dumps(context) + "\n")

    callback.__name__ = f"record_{name}"
    return callback


def raises(context):
    raise RuntimeError("this callback fails on purpose")


@task(on_success_callback=[record("ok-success"), raises])
def ok():
    return 1


@task(
    retries=1,
    retry_delay=0.1,
    retry_jitter=False,
    on_retry_callback=record("flaky-retry"),
    on_success_callback=record("flaky-success"),
)
def flaky(ctx):
    if ctx.try_number < 2:
        raise ConnectionError("the first try fails")
    return 2


@task(on_failure_callback=record("bad-failure"), on_success_callback=record("bad-success"))
def bad():
    raise ValueError("bad on purpose")


@task(trigger_rule="one_failed", on_skipped_callback=record("cleanup-skipped"))
def cleanup():
    return 0


@task(on_skipped_callback=record("quiet-skipped"))
def quiet():
    raise Skip("nothing to do today")


with DAG(
    "n_callbacks",
    params={"who": "team"},
    on_failure_callback=record("n_callbacks-failure"),
    on_success_callback=record("n_callbacks-success"),
):
    first = ok()
    flaky()
    bad()
    quiet()
    first >> cleanup()


@task
def hello():
    return "hello"


with DAG(
    "n_webhook",
    on_success_callback=[record("n_webhook-success"), WebhookNotifier(WEBHOOK + "/dag")],
):
    hello.override(
        on_success_callback=WebhookNotifier(
            WEBHOOK + "/task",
            headers={"Authorization": "Bearer test-token"},
            text="{dag_id}.{task_id} is {state}",
        )
    )()


@task(
    on_failure_callback=SmtpNotifier(
        "127.0.0.1", SMTP_PORT, from_addr="beatflow@example.com", to_addrs=["ops@example.com"]
    )
)
def breaks():
    raise ValueError("the warehouse is down")


with DAG("n_mail"):
    breaks()


with DAG("n_failing_notifier"):
    hello.override(
        on_success_callback=[
            raises,
            WebhookNotifier(WEBHOOK + "/fail", tries=2),
            record("n_failing_notifier-success"),
        ]
    )()


with DAG("n_slow_hook"):
    hello.override(on_success_callback=WebhookNotifier(WEBHOOK + "/slow", timeout=60))()
