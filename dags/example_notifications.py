"""Callbacks and notifiers: `load` posts to a chat webhook when it fails for good, and the DAG
posts when a run succeeds or fails. The webhook's URL comes from the environment
(EXAMPLE_WEBHOOK_URL, e.g. a Slack incoming webhook); without it the DAG only logs. A plain
callable callback runs in the worker once the state is recorded; a notifier is sent by a
`beatflow.notify` task, at most once per event, with retries."""

import logging
import os

from beatflow import DAG, WebhookNotifier, task

log = logging.getLogger(__name__)
WEBHOOK_URL = os.environ.get("EXAMPLE_WEBHOOK_URL", "")


def log_event(context) -> None:
    """A plain callback: gets the event's context (dag_id, run_id, task_id, try_number, state,
    exception, logical_date, conf...)."""
    log.warning(
        "%s of %s/%s: %s", context["event"], context["dag_id"], context["run_id"], context["state"]
    )


# a notifier only when a URL is configured: an example DAG posts nowhere by default
chat = [WebhookNotifier(WEBHOOK_URL)] if WEBHOOK_URL else []


@task
def extract(ctx) -> list[int]:
    return list(range(ctx.params["rows"]))


@task(
    retries=1, retry_delay=1.0, on_retry_callback=log_event, on_failure_callback=[log_event, *chat]
)
def load(rows: list[int], ctx) -> int:
    if ctx.params["fail"]:
        raise RuntimeError("the warehouse refused the load")
    return len(rows)


with DAG(
    "example_notifications",
    schedule=None,
    params={"rows": 3, "fail": False},
    tags=["example"],
    on_success_callback=[log_event, *chat],
    on_failure_callback=[log_event, *chat],
):
    load(extract())
