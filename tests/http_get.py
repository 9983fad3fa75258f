"""GETs of a test against a local server (Flower, the web app, /metrics, a container's port),
with or without basic auth."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request


def http_get(
    url: str, auth: tuple[str, str] | None = None, timeout: float = 5.0
) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 (and no body) when nothing answers."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # a local URL
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except OSError:
        return 0, b""


def http_status(url: str, auth: tuple[str, str] | None = None) -> int:
    """The status of a GET; 0 when nothing answers."""
    return http_get(url, auth)[0]
