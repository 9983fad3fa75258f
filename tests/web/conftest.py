"""A real beatflow cluster (worker process, Redis, PostgreSQL) loading tests/web/dags, and the
web app served by uvicorn on a free port in a thread of the test process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from beatflow.web import create_web_app
from tests import services
from tests.cluster import Cluster, own_cluster
from tests.procs import wait_for

DAGS = Path(__file__).resolve().parent / "dags"
USER, PASSWORD = "admin", "correct horse battery staple"
TOKEN = "ci-token-0123456789abcdef"


@dataclass
class WebServer:
    url: str
    cluster: Cluster
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, token: str | None = TOKEN, **kw: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kw)  # type: ignore[arg-type]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 60.0) -> dict[str, object]:
        with self.client() as c:

            def final() -> dict[str, object] | None:
                body = c.get(f"/api/v1/dags/{dag_id}/runs/{run_id}").json()
                return body if body["state"] not in ("queued", "running") else None

            try:
                return wait_for(final, timeout, 0.1, f"run {dag_id}/{run_id} to finish")  # type: ignore[return-value]
            except TimeoutError:
                raise AssertionError(f"worker logs:\n{self.cluster.log_tail()}") from None


def serve(settings: Settings, c: Cluster) -> WebServer:
    app = create_web_app(settings, runtime_of(c.app))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="web", daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30.0, 0.05, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    return WebServer(f"http://127.0.0.1:{port}", c, server, thread)


@pytest.fixture(scope="module")
def web_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("web")
    with own_cluster(redis_server, postgres_server, tmp, dags=DAGS) as c:
        yield c


@pytest.fixture(scope="module")
def web(web_cluster: Cluster) -> Iterator[WebServer]:
    base = runtime_of(web_cluster.app).settings
    settings = base.replace(web_user=USER, web_password=PASSWORD, web_tokens=f"ci:{TOKEN}")
    server = serve(settings, web_cluster)
    try:
        yield server
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=10)
