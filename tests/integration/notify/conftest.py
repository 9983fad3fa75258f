"""Real servers for the notifier tests, started by the test: an HTTP server (a threaded
``http.server``) that records every POST and answers 500 on ``/fail``, and an SMTP server
(aiosmtpd) that keeps every mail it receives."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests import services
from tests.cluster import Cluster, cluster

DAGS = Path(__file__).resolve().parent / "dags"


@dataclass
class Hook:
    """What the HTTP server received: one (path, headers, JSON body) per POST."""

    url: str
    posts: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)  # answers /slow

    def received(self, path: str, run_id: str) -> list[tuple[dict[str, str], Any]]:
        """The (headers, body) of the POSTs to ``path`` about ``run_id``."""
        with self.lock:
            return [
                (h, body)
                for p, h, body in self.posts
                if p == path and body.get("beatflow", {}).get("run_id") == run_id
            ]


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    server_hook = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            with server_hook.lock:
                server_hook.posts.append((self.path, dict(self.headers), json.loads(raw)))
            if self.path.startswith("/slow"):  # hold the sender until the test releases it
                server_hook.release.wait(timeout=60)
            self.send_response(500 if self.path.startswith("/fail") else 200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_hook.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server_hook
    finally:
        server_hook.release.set()
        server.shutdown()
        server.server_close()


@dataclass
class Mailbox:
    """What the SMTP server received."""

    port: int
    mails: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[tuple[str, list[str], EmailMessage]]:
        with self.lock:
            return list(self.mails)


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.box.lock:
            mail = message_from_bytes(envelope.content, policy=policy.default)
            assert isinstance(mail, EmailMessage)
            self.box.mails.append((envelope.mail_from, list(envelope.rcpt_tos), mail))
        return "250 OK"


@pytest.fixture(scope="module")
def mailbox() -> Iterator[Mailbox]:
    port = services.free_port()
    box = Mailbox(port=port)
    controller = Controller(_Handler(box), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class Notified:
    cluster: Cluster
    hook: Hook
    mailbox: Mailbox

    def lines(self, name: str) -> list[dict[str, Any]]:
        """The contexts the plain callback ``record(name)`` of the test DAGs was called with."""
        path = self.cluster.marks / f"{name}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture(scope="module")
def notified(
    hook: Hook,
    mailbox: Mailbox,
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Notified]:
    """A worker loading this folder's DAGs, its notifiers pointed at ``hook`` and ``mailbox``,
    on a Redis database and a PostgreSQL database of its own."""
    tmp = tmp_path_factory.mktemp("notify")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    env = {"NOTIFY_TEST_WEBHOOK": hook.url, "NOTIFY_TEST_SMTP_PORT": str(mailbox.port)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the DAGs this process loads point at the same servers
    try:
        with cluster(tmp, redis_url, db_url, dags=DAGS, env=env) as c:
            yield Notified(cluster=c, hook=hook, mailbox=mailbox)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
