"""The web package's parts without services: sessions and tokens, id rules, schedules in words,
the SVG graph, the task log capture (cap, failures swallowed) and the web settings."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis

from beatflow import DAG, task
from beatflow.dag.schedule import Schedule
from beatflow.errors import SettingsError
from beatflow.logs import correlation
from beatflow.settings import Settings
from beatflow.settings.accounts import Role
from beatflow.store.task_logs import TaskLogBatch
from beatflow.web.auth import Auth
from beatflow.web.graph import render_svg
from beatflow.web.limits import ApiError, check_id
from beatflow.web.schedule_words import schedule_words
from beatflow.web.sessions import KEY_PREFIX
from beatflow.worker.log_capture import TaskLogCapture
from tests.procs import wait_for
from tests.services import free_port

SETTINGS = Settings(web_password="pw", web_tokens="ci:0123456789abcdef", web_secret_key="k")


def test_a_session_cookie_round_trips_and_any_tampering_is_refused(redis_url: str) -> None:
    settings = SETTINGS.replace(broker_url=redis_url)
    auth = Auth(settings)
    cookie = auth.new_session("admin")
    who = auth.read_session(cookie)
    assert who is not None and who.actor == "user:admin" and who.csrf
    body, stamp, mac = cookie.split(".")

    def flip(part: str) -> str:  # another first character (a last one may be only padding bits)
        return ("A" if part[0] != "A" else "B") + part[1:]

    assert auth.read_session(f"{body}.{stamp}.{flip(mac)}") is None
    assert auth.read_session(f"{flip(body)}.{stamp}.{mac}") is None
    assert auth.read_session(f"{body}.{flip(stamp)}.{mac}") is None
    assert auth.read_session("not-a-cookie") is None
    assert Auth(settings.replace(web_secret_key="other")).read_session(cookie) is None
    assert Auth(settings.replace(web_secret_key="")).read_session(cookie) is None  # random key


def test_a_session_older_than_its_maximum_is_refused(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = Auth(SETTINGS.replace(broker_url=redis_url, web_session_max_seconds=600))
    cookie = auth.new_session("admin")
    assert auth.read_session(cookie) is not None
    later = time.time() + 601
    monkeypatch.setattr(time, "time", lambda: later)
    assert auth.read_session(cookie) is None


def test_an_idle_session_ends_and_a_used_one_is_kept(redis_url: str) -> None:
    auth = Auth(SETTINGS.replace(broker_url=redis_url, web_session_idle_seconds=2))
    client = redis.Redis.from_url(redis_url)
    idle = auth.new_session("admin")
    [idle_key] = client.keys(KEY_PREFIX + "*")
    used = auth.new_session("admin")
    assert 0 < client.ttl(idle_key) <= 2

    def idle_gone() -> bool:
        assert auth.read_session(used) is not None  # each use restarts its idle clock
        return not client.exists(idle_key)  # looked at without touching it

    wait_for(idle_gone, 15.0, 0.2, "the idle session to end")
    assert auth.read_session(idle) is None
    assert auth.read_session(used) is not None


def test_a_session_ended_at_logout_is_refused_everywhere(redis_url: str) -> None:
    settings = SETTINGS.replace(broker_url=redis_url)
    auth, other_process = Auth(settings), Auth(settings)
    cookie = auth.new_session("admin")
    assert other_process.read_session(cookie) is not None
    auth.end_session(cookie)
    assert auth.read_session(cookie) is None
    assert other_process.read_session(cookie) is None
    auth.end_session("not-a-cookie")  # nothing to end: no error


def test_sessions_need_their_redis_and_say_so() -> None:
    auth = Auth(SETTINGS.replace(broker_url=f"redis://127.0.0.1:{free_port()}/0"))
    with pytest.raises(ApiError) as err:
        auth.new_session("admin")
    assert err.value.status == 503 and "session store (Redis) is unavailable" in err.value.message


def test_passwords_and_tokens_are_checked_exactly() -> None:
    auth = Auth(SETTINGS)
    assert auth.check_password("admin", "pw") is Role.ADMIN  # the user before roles: admin
    assert auth.check_password("admin", "pw ") is None
    assert auth.check_password("root", "pw") is None
    assert auth.check_token("0123456789abcdef") == ("ci", Role.ADMIN)
    assert auth.check_token("0123456789abcde") is None


@pytest.mark.parametrize(
    "value",
    ["manual__2026-11-30T10:00:00.123456+00:00", "etl", "a.b-c_d", "scheduled__x@y~z"],
)
def test_ids_of_the_safe_charset_pass(value: str) -> None:
    assert check_id(value, "run id") == value


@pytest.mark.parametrize(
    "value", ["", "..", "../etc", "a/b", "a\\b", "a\x00b", " a", "a b", ".hidden", "x" * 251]
)
def test_ids_with_path_tricks_or_odd_characters_are_refused(value: str) -> None:
    with pytest.raises(ApiError) as err:
        check_id(value, "run id")
    assert err.value.status == 400 and "invalid run id" in err.value.message


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (None, "manual only"),
        (Schedule.parse("*/5 * * * *", ZoneInfo("UTC")), "every 5 minutes"),
        (Schedule.parse("@hourly", ZoneInfo("UTC")), "every hour at minute 0"),
        (
            Schedule.parse("30 2 * * *", ZoneInfo("Europe/Paris")),
            "every day at 02:30 (Europe/Paris)",
        ),
        (Schedule.parse("0 9 * * 1-5", ZoneInfo("UTC")), "every weekday at 09:00"),
        (Schedule.parse("@weekly", ZoneInfo("UTC")), "every Sunday at 00:00"),
        (Schedule.parse("0 0 1 * *", ZoneInfo("UTC")), "on day 1 of every month at 00:00"),
        (Schedule.parse("5,35 */2 * * *", ZoneInfo("UTC")), "cron 5,35 */2 * * *"),
        (Schedule.parse(timedelta(minutes=15), ZoneInfo("UTC")), "every 15 minutes"),
        (Schedule.parse(timedelta(days=1), ZoneInfo("UTC")), "every day"),
    ],
)
def test_schedules_read_in_words(schedule: Schedule | None, words: str) -> None:
    assert schedule_words(schedule) == words


def test_the_graph_has_a_box_per_task_an_edge_per_dependency_and_the_states() -> None:
    @task
    def a() -> int:
        return 1

    @task
    def b(x: int) -> int:
        return x

    with DAG("g") as dag:
        first = a()
        b(first) >> b.override(task_id="c")(first)
    svg = render_svg(dag.model, {"a": "success", "b": "failed"}, {"a": "/t/a"})
    assert svg.count('<g class="node') == 3
    assert svg.count('class="edge"') == 3
    assert 'class="node state-success" data-task="a"' in svg
    assert 'class="node state-none" data-task="c"' in svg
    assert '<a href="/t/a">' in svg
    assert 'stroke-dasharray="4 3"' in svg  # the order-only edge b >> c


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[TaskLogBatch] = []
        self.fail = fail

    def __call__(self, batches: Sequence[TaskLogBatch]) -> None:
        if self.fail:
            raise RuntimeError("database down")
        self.batches.extend(batches)


def _logger(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"capture-test-{id(handler)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    return logger


IDS = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "dedupe_key": "d/r/t"}


def test_lines_inside_a_try_are_kept_per_try_and_capped_with_one_marker() -> None:
    sink = Sink()
    handler = TaskLogCapture(sink, max_bytes=600, flush_seconds=0.05)
    log = _logger(handler)
    log.info("outside any task run: not kept")
    with correlation(**IDS, try_number=1):
        log.info("first try %d", 1)
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    with correlation(**IDS, try_number=2):
        for i in range(50):
            log.warning("line %d %s", i, "x" * 20)
    wait_for(lambda: sum(len(b.lines) for b in sink.batches) >= 5, 10, 0.05, "lines written")
    handler.close()
    by_try: dict[int, list[dict[str, str]]] = {}
    for b in sink.batches:
        by_try.setdefault(b.try_number, []).extend(b.lines)
    assert [line["message"] for line in by_try[1]] == ["first try 1", "it failed"]
    assert "ValueError: boom" in by_try[1][1]["exc_info"]
    assert 2 < len(by_try[2]) < 50
    assert "truncated at 600 bytes" in by_try[2][-1]["message"]
    assert sum("truncated" in line["message"] for line in by_try[2]) == 1


def test_a_failing_log_store_never_reaches_the_task() -> None:
    handler = TaskLogCapture(Sink(fail=True), max_bytes=10_000, flush_seconds=0.05)
    log = _logger(handler)
    with correlation(**IDS, try_number=1):
        log.error("still fine")
        handler.flush_soon()
    wait_for(lambda: handler.dropped == 1, 30, 0.05, "the failed write to be counted")
    handler.close()


def test_web_secrets_come_from_files_and_every_mistake_is_reported(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("ci:0123456789abcdef,deploy:fedcba9876543210")
    s = Settings.from_env(
        {"BEATFLOW_WEB_PASSWORD_FILE": str(secret), "BEATFLOW_WEB_TOKENS_FILE": str(tokens)}
    )
    assert s.web_password == "s3cret" and s.extra == {}
    assert "s3cret" not in repr(s) and "0123456789abcdef" not in repr(s)
    with pytest.raises(SettingsError) as err:
        Settings.from_env(
            {
                "BEATFLOW_WEB_PASSWORD": "x",
                "BEATFLOW_WEB_PASSWORD_FILE": str(secret),
                "BEATFLOW_WEB_SECRET_KEY_FILE": str(tmp_path / "missing"),
                "BEATFLOW_WEB_TOKENS": "ci:short",
                "BEATFLOW_API_URL": "ftp://x",
            }
        )
    text = str(err.value)
    assert len(err.value.problems) == 4, text
    assert "both set" in text and "cannot read the secret file" in text
    assert "tokens of at least 16 characters" in text and "http://" in text
    assert "short" not in text  # the bad token itself is masked


DAG_MODULE = """
from beatflow import DAG, task

@task
def hello() -> str:
    return "hi"

with DAG("{name}"):
    hello()
"""


def test_a_new_dag_module_shows_up_without_restarting_the_web_server(tmp_path: Path) -> None:
    import threading

    import httpx
    import uvicorn

    from beatflow.web import create_web_app

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "first.py").write_text(DAG_MODULE.format(name="first"))
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'results.db'}",
        dags_folder=str(dags),
        web_password="pw",
        web_tokens="ci:0123456789abcdef",
        schedule_sync_interval=0.5,
    )
    config = uvicorn.Config(
        create_web_app(settings), host="127.0.0.1", port=0, log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, 0.05, "uvicorn to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        headers = {"Authorization": "Bearer 0123456789abcdef"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as c:

            def ids() -> list[str]:
                return [d["dag_id"] for d in c.get("/api/v1/dags").json()["dags"]]

            assert ids() == ["first"]
            (dags / "second.py").write_text(DAG_MODULE.format(name="second"))
            (dags / "broken.py").write_text("import nowhere_to_be_found\n")
            wait_for(lambda: ids() == ["first", "second"], 30, 0.1, "the new DAG to show")
            errors = c.get("/api/v1/dags").json()["errors"]
            assert [e["file"].endswith("broken.py") for e in errors] == [True]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_failed_logins_from_one_address_are_braked_for_a_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    auth = Auth(SETTINGS)
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    for _ in range(10):
        assert auth.login_allowed("10.0.0.1")
        auth.login_failed("10.0.0.1")
    assert not auth.login_allowed("10.0.0.1")
    assert auth.login_allowed("10.0.0.2")  # another address is not affected
    now[0] += 61
    assert auth.login_allowed("10.0.0.1")


def test_beatflow_web_refuses_to_start_without_a_password(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.procs import beatflow_env

    env = beatflow_env({"BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}"})
    argv = [sys.executable, "-c", "from beatflow.cli import run; run()", "web", "--port", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "BEATFLOW_WEB_PASSWORD (or BEATFLOW_WEB_PASSWORD_FILE) is required" in done.stderr


@pytest.mark.parametrize(
    ("headers", "same"),
    [
        ({}, True),  # curl, scripts: no Origin, no Referer
        ({"origin": "http://ui.example:8080"}, True),
        ({"origin": "https://ui.example:8080"}, True),  # TLS ended at a proxy
        ({"referer": "https://ui.example:8080/dags/etl"}, True),
        ({"origin": "https://evil.example"}, False),
        ({"origin": "http://ui.example:8080.evil.example"}, False),
        ({"origin": "null"}, False),
        ({"referer": "https://evil.example/?u=http://ui.example:8080/"}, False),
    ],
)
def test_a_change_must_come_from_the_same_host(headers: dict[str, str], same: bool) -> None:
    from starlette.requests import Request

    from beatflow.web.auth import same_origin

    raw = [(b"host", b"ui.example:8080"), *((k.encode(), v.encode()) for k, v in headers.items())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw, "scheme": "http"}
    assert same_origin(Request(scope)) is same


def test_a_result_preview_is_capped_and_says_so() -> None:
    from beatflow.web.views import result_preview

    assert result_preview({"n": 1}) == {"preview": '{"n": 1}', "bytes": 8, "truncated": False}
    big = result_preview(["é" * 10_000])
    assert big["truncated"] is True and big["bytes"] == 20_004  # é as written: 2 bytes of UTF-8
    assert len(big["preview"].encode()) <= 4096 and big["preview"].startswith('["ééé')
    assert result_preview("café ✓ a<b & c")["preview"] == '"café ✓ a<b & c"'  # text as written


def test_task_logs_are_pruned_with_their_run(tmp_path: Path) -> None:
    from beatflow.store import Store

    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    store.upgrade()
    for run_id in ("old", "live"):
        store.create_dag_run("d", run_id)
        store.add_task_logs(
            [TaskLogBatch("d", run_id, "t", -1, 1, [{"message": f"{run_id} line"}])]
        )
    store.finish_dag_run("d", "old", "success")
    assert store.prune(timedelta(0)) == 1
    assert store.get_task_logs("d", "old", "t") == []
    assert [x["message"] for x in store.get_task_logs("d", "live", "t")] == ["live line"]
    store.close()


def test_the_apps_openapi_is_the_document_it_serves_without_422s(tmp_path: Path) -> None:
    from beatflow.web import create_web_app

    settings = SETTINGS.replace(database_url=f"sqlite:///{tmp_path}/db", dags_folder=str(tmp_path))
    doc = create_web_app(settings).openapi()  # what the docs' API reference is built from
    operations = [op for item in doc["paths"].values() for op in item.values()]
    assert len(operations) >= 20
    assert all("400" in op["responses"] and "422" not in op["responses"] for op in operations)


def test_the_timeline_puts_every_started_task_run_on_one_axis() -> None:
    from datetime import UTC, datetime, timedelta

    from beatflow.web.gantt import MIN_WIDTH, bars

    t0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)

    def row(label: str, start: int | None, end: int | None) -> dict[str, object]:
        at = lambda s: None if s is None else (t0 + timedelta(seconds=s)).isoformat()  # noqa: E731
        return {"label": label, "state": "x", "started_at": at(start), "ended_at": at(end)}

    rows = [row("a", 0, 10), row("b", 10, 40), row("c", 30, None), row("wait", None, None)]
    chart = bars(rows, now=t0 + timedelta(seconds=100))
    assert chart["span"] == 100.0  # from the first start to now, where c still runs
    got = {b["label"]: (b["offset"], b["width"], b["running"]) for b in chart["bars"]}
    assert got == {"a": (0.0, 10.0, False), "b": (10.0, 30.0, False), "c": (30.0, 70.0, True)}
    tiny = bars([row("a", 0, 0), row("b", 0, 50)], now=t0)["bars"][0]
    assert tiny["width"] == MIN_WIDTH and tiny["seconds"] == 0.0  # still visible
    assert bars([row("wait", None, None)], now=t0) == {"span": 0.0, "bars": []}
