"""Callbacks and notifiers: what runs when a task run or a DAG run reaches a state.

- ``base``: ``Notifier`` (subclass it: ``notify(context)``) and the context a callback gets;
- ``webhook``: ``WebhookNotifier`` (a Slack-compatible JSON POST);
- ``smtp``: ``SmtpNotifier`` (a mail; its password from the environment or a ``_FILE``);
- ``callbacks``: after a state is committed, call the plain callbacks in process and put each
  notifier's event in the outbox (``store.notifications``);
- ``deliver``: ``beatflow.notify``, the Celery task that claims an event and sends it (at most
  once, with retries);
- ``sweep``: the reconciler's part: events whose message or outbox row was lost."""

from __future__ import annotations

from beatflow.notify.base import Notifier
from beatflow.notify.smtp import SmtpNotifier
from beatflow.notify.webhook import WebhookNotifier

__all__ = ["Notifier", "SmtpNotifier", "WebhookNotifier"]
