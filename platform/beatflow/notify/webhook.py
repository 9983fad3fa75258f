"""``WebhookNotifier``: POST a Slack-compatible JSON body (``text`` plus ``blocks``) to a URL.
Slack's incoming webhooks, Mattermost, Rocket.Chat, Microsoft Teams' workflows and most chat
tools take it as is; anything else reads ``text`` or the ``beatflow`` object (the context)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from beatflow.notify.base import DEFAULT_TRIES, Notifier, message, subject

Text = str | Callable[[Mapping[str, Any]], str] | None


def render(text: Text, context: Mapping[str, Any]) -> str:
    """``text`` for ``context``: a callable's return, a ``str.format`` template over the
    context's keys (``"{dag_id} {state}"``), or the default :func:`base.message`."""
    if text is None:
        return message(context)
    if callable(text):
        return str(text(context))
    return text.format(**context)


def slack_body(text: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """``{"text": ..., "blocks": [...], "beatflow": context}``: the text, then one section with
    the run's fields."""
    fields = [
        {"type": "mrkdwn", "text": f"*{name}*\n{value}"}
        for name, value in (
            ("DAG", context["dag_id"]),
            ("Task", context.get("task_id") or "(the run)"),
            ("Run", context["run_id"]),
            ("State", context.get("state")),
            ("Try", context.get("try_number")),
            ("Logical date", context.get("logical_date")),
        )
        if value not in (None, "")
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {"type": "section", "fields": fields[:10]},
    ]
    return {"text": subject(context), "blocks": blocks, "beatflow": dict(context)}


class WebhookNotifier(Notifier):
    """POST the event as JSON to ``url`` (``headers`` added, e.g. an ``Authorization``).

    The URL of a chat webhook is a secret (its path is the token): logs name its host only.
    A 2xx answer is a send; anything else (or no answer in ``timeout`` seconds) is tried again,
    ``tries`` times in all."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        text: Text = None,
        timeout: float = 10.0,
        tries: int = DEFAULT_TRIES,
    ) -> None:
        super().__init__(tries=tries)
        parts = urlsplit(url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"WebhookNotifier needs an http:// or https:// URL, got {self._shown(url)}"
            )
        self.url = url
        self.headers = dict(headers or {})
        self.text = text
        self.timeout = float(timeout)

    @staticmethod
    def _shown(url: str) -> str:
        parts = urlsplit(url or "")
        return f"{parts.scheme}://{parts.hostname}/..." if parts.hostname else repr(url[:20])

    def __repr__(self) -> str:
        return f"WebhookNotifier({self._shown(self.url)})"

    def body(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON body for ``context`` (override to post another shape)."""
        return slack_body(render(self.text, context), context)

    def notify(self, context: Mapping[str, Any]) -> None:
        data = json.dumps(self.body(context), default=str).encode()
        request = urllib.request.Request(
            self.url,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", **self.headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                answer.read(1024)
        except urllib.error.HTTPError as exc:
            raise WebhookError(f"{self._shown(self.url)} answered {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WebhookError(f"{self._shown(self.url)} unreachable: {reason}") from None


class WebhookError(Exception):
    """A webhook send failed (its message names the host, never the URL's secret path)."""
