"""`beatflow dags trigger --api URL`: trigger (and follow) a run through beatflow web's REST API
with a bearer token, so a CI runner needs neither Redis, the results DB nor the DAG code."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

import click

from beatflow.cli.common import CliError, echo_json


class ApiClient:
    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint="--api")
        if not token:
            raise CliError(
                "BEATFLOW_API_TOKEN (or BEATFLOW_API_TOKEN_FILE) is required to use the API: "
                "a token from the web server's BEATFLOW_WEB_TOKENS"
            )
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read())
                message = payload.get("error", exc.reason)
            except ValueError:
                payload, message = {}, exc.reason
            problems = payload.get("problems") if isinstance(payload, dict) else None
            detail = "".join(f"\n  - {p}" for p in problems or ())
            raise CliError(f"API {exc.code}: {message}{detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError(f"cannot reach the API at {self.base}: {reason}") from None


def trigger_via_api(
    url: str,
    token: str,
    dag_id: str,
    conf: dict[str, Any] | None,
    run_id: str | None,
    *,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    client = ApiClient(url, token)
    body: dict[str, Any] = {"conf": conf or {}}
    if run_id:
        body["run_id"] = run_id
    dag = quote(dag_id, safe="")
    record = client.call("POST", f"/api/v1/dags/{dag}/runs", body)
    if not wait:
        if as_json:
            echo_json(record)
        else:
            click.echo(f"triggered {dag_id} run {record['run_id']} ({record['state']}) via {url}")
        return
    if not as_json:
        click.echo(f"triggered {dag_id} run {record['run_id']} via {url}; following it...")
    path = f"/api/v1/dags/{dag}/runs/{quote(record['run_id'], safe='')}"
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[str, int]] = {}
    while True:
        status = client.call("GET", path + "/status")
        for label, info in sorted(status["instances"].items()):
            marker = (info["state"], info["try_number"])
            if seen.get(label) != marker and not as_json:
                click.echo(f"  {label:<30} {info['state']:<16} try {info['try_number']}")
            seen[label] = marker
        if status["final"]:
            break
        if time.monotonic() > deadline:
            click.echo(
                f"error: run {record['run_id']} still {status['state']} after {timeout}s", err=True
            )
            sys.exit(3)
        time.sleep(1.0)
    final = client.call("GET", path)
    if as_json:
        echo_json(final)
    else:
        click.echo(
            f"run {final['run_id']}: {final['state']} in {final['duration_seconds'] or 0:.2f}s"
        )
    sys.exit(0 if final["state"] == "success" else 1)
