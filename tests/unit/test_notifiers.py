"""Callback options and notifier objects without a server: what a DAG file may give as a
callback (and the clear error for anything else), the deprecated names still taken, and the
notifiers' checks, messages and secrets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import beatflow
from beatflow import DAG, Notifier, SmtpNotifier, WebhookNotifier, task
from beatflow.errors import DagDefinitionError
from beatflow.notify.base import event_key, make_context, message
from beatflow.notify.smtp import secret_from_env
from beatflow.notify.webhook import slack_body

ROOT = Path(__file__).resolve().parents[2]


def _noop(context: object) -> None:
    pass


def test_callbacks_take_a_callable_a_notifier_or_a_list_at_task_and_dag_level() -> None:
    hook = WebhookNotifier("https://hooks.example.com/services/T/B/secret")

    @task(on_failure_callback=[_noop, hook], on_skipped_callback=_noop, on_retry=_noop)
    def work() -> int:
        return 1

    with DAG("cb", on_success_callback=hook, on_failure_callback=[_noop]) as dag:
        work()
    spec = dag.model.tasks["work"]
    assert spec.callbacks == {"failure": (_noop, hook), "skipped": (_noop,)}
    assert spec.on_retry is _noop  # the deprecated name still works
    assert dag.model.callbacks == {"success": (hook,), "failure": (_noop,)}


def test_callbacks_in_default_args_reach_every_task() -> None:
    with DAG("cb_defaults", default_args={"on_retry_callback": _noop}) as dag:
        task(lambda: 1, task_id="a")()  # type: ignore[call-arg]
    assert dag.model.tasks["a"].callbacks == {"retry": (_noop,)}


@pytest.mark.parametrize("bad", ["https://hooks.example.com", 3, [_noop, "x"]])
def test_a_callback_that_is_not_callable_is_refused_with_its_name(bad: object) -> None:
    @task(on_success_callback=bad)
    def work() -> int:
        return 1

    with (
        pytest.raises(DagDefinitionError, match="on_success_callback must be a callable"),
        DAG("cb_bad"),
    ):
        work()
    with pytest.raises(DagDefinitionError, match="on_failure_callback must be a callable"):
        DAG("cb_bad_dag", on_failure_callback=bad)


def test_the_notifiers_are_importable_from_beatflow() -> None:
    assert beatflow.Notifier is Notifier
    assert {"Notifier", "WebhookNotifier", "SmtpNotifier"} <= set(beatflow.__all__)
    assert issubclass(WebhookNotifier, Notifier) and issubclass(SmtpNotifier, Notifier)


def test_a_webhook_url_must_be_http_and_its_secret_path_is_never_shown() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        WebhookNotifier("hooks.example.com/services/x")
    hook = WebhookNotifier("https://hooks.example.com/services/T/B/secret")
    assert "secret" not in repr(hook) and "hooks.example.com" in repr(hook)


def _context() -> dict[str, object]:
    return make_context(
        event="failure", dag_id="etl", run_id="r1", state="failed", task_id="load",
        map_index=-1, try_number=2, exception="ValueError: no", conf={"a": 1},
    )  # fmt: skip


def test_the_slack_body_has_text_blocks_and_the_context() -> None:
    body = slack_body(message(_context()), _context())
    assert body["text"] == "[beatflow] etl.load failed (try 2)"
    assert "error: ValueError: no" in body["blocks"][0]["text"]["text"]
    assert {"type": "mrkdwn", "text": "*Run*\nr1"} in body["blocks"][1]["fields"]
    assert body["beatflow"]["conf"] == {"a": 1}


def test_an_event_key_names_the_run_the_task_the_try_the_event_and_the_notifier() -> None:
    assert event_key(_context(), 1) == "etl/r1/load/-1/2/failure/1"
    dag_end = make_context(event="success", dag_id="etl", run_id="r1", state="success")
    assert event_key(dag_end, 0) == "etl/r1/@dag/-1/0/success/0"
    skipped = make_context(event="skipped", dag_id="etl", run_id="r1", state="skipped",
                           task_id="load", try_number=1)  # fmt: skip
    assert event_key(skipped, 0) == "etl/r1/load/-1/0/skipped/0"  # however the skip came


def test_the_smtp_password_comes_from_the_environment_or_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("X_SMTP_PASSWORD", raising=False)
    assert secret_from_env("X_SMTP_PASSWORD") is None
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("X_SMTP_PASSWORD_FILE", str(secret))
    assert secret_from_env("X_SMTP_PASSWORD") == "s3cret"
    monkeypatch.setenv("X_SMTP_PASSWORD", "other")
    with pytest.raises(ValueError, match="both set"):
        secret_from_env("X_SMTP_PASSWORD")
    mailer = SmtpNotifier("mail.example.com", 587, from_addr="a@example.com", to_addrs="b@x.org",
                          username="bot", password_env="X_SMTP_PASSWORD")  # fmt: skip
    assert repr(mailer) == "SmtpNotifier(mail.example.com:587)"
    assert mailer.mail(_context())["To"] == "b@x.org"


def _load_example(monkeypatch: pytest.MonkeyPatch, url: str | None) -> object:
    if url is None:
        monkeypatch.delenv("EXAMPLE_WEBHOOK_URL", raising=False)
    else:
        monkeypatch.setenv("EXAMPLE_WEBHOOK_URL", url)
    path = ROOT / "dags" / "example_notifications.py"
    spec = importlib.util.spec_from_file_location("example_notifications_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_dag_posts_nowhere_without_a_url_and_to_it_with_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _load_example(monkeypatch, None).chat == []  # type: ignore[attr-defined]
    [hook] = _load_example(monkeypatch, "https://hooks.example.com/x").chat  # type: ignore[attr-defined]
    assert isinstance(hook, WebhookNotifier)
