"""HTML error pages for people: the status, what went wrong, and the way back (the DAG, the
run, the runs list) read from the path that failed. The API keeps its JSON errors."""

from __future__ import annotations

import logging
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import Response

from beatflow.web.deps import auth_of
from beatflow.web.limits import ID_RE
from beatflow.web.pages.base import app_css, render

log = logging.getLogger(__name__)

TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    405: "Not a page",
    409: "Conflict",
    413: "Too large",
    429: "Too many attempts",
    503: "Unavailable",
}


def wants_html(request: Request) -> bool:
    """A person's browser (pages, not /api/): it asks for text/html."""
    return not request.url.path.startswith("/api/") and "text/html" in request.headers.get(
        "accept", ""
    )


def ways_back(path: str, status: int) -> list[tuple[str, str]]:
    """(label, href) links out of an error at ``path``: its run, its DAG's runs, its DAG (only
    well-formed ids, and not the DAG whose own page was not found)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    links: list[tuple[str, str]] = []
    unknown_dag = status == 404 and len(parts) == 2
    if len(parts) >= 2 and parts[0] == "dags" and ID_RE.match(parts[1]) and not unknown_dag:
        dag = quote(parts[1], safe="")
        if len(parts) >= 4 and parts[2] == "runs" and ID_RE.match(parts[3]) and len(parts) > 4:
            links.append((f"run {parts[3]}", f"/dags/{dag}/runs/{quote(parts[3], safe='')}"))
        links.append((f"DAG {parts[1]}", f"/dags/{dag}"))
        links.append((f"runs of {parts[1]}", f"/runs?dag_id={dag}"))
    links += [("all DAGs", "/"), ("all runs", "/runs")]
    return links


def error_page(request: Request, status: int, message: str) -> Response:
    try:
        who = auth_of(request).authenticate(request)
    except Exception:  # the error page must not fail too (e.g. Redis down): show it logged out
        log.debug("error page without a user: authentication failed", exc_info=True)
        who = None
    return render(
        request,
        "error.html",
        who,
        status=status,
        code=status,
        title=TITLES.get(status, "Error"),
        message=message,
        links=ways_back(request.url.path, status) if who else [("log in", "/login")],
        css=app_css(),
    )
