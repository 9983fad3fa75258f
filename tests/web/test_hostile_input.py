"""Bad input never answers 5xx: JSON nested far too deep (API and form) is a 400 naming the
limit, and every route of the app, enumerated from the app itself, answers hostile bodies,
query strings and headers from an authenticated caller with something below 500."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import BaseRoute, Route

from beatflow.records_json import MAX_JSON_DEPTH
from tests.web.conftest import WebServer
from tests.web.test_api import login

pytestmark = pytest.mark.slow

DEEP = 5000


def _nested_conf(depth: int) -> str:
    """{"conf": {"a": {"a": ... {}}}} nested ``depth`` objects deep (about 10 KB at 5,000)."""
    return '{"conf": ' + '{"a":' * depth + "{}" + "}" * depth + "}"


def test_a_conf_nested_thousands_deep_is_a_400_naming_the_limit(web: WebServer) -> None:
    body = _nested_conf(DEEP)
    assert len(body) < 32_000
    with web.client() as c:
        before = c.get("/api/v1/dags/web_etl/runs").json()["runs"]
        for content_type in ("application/json", "text/plain"):
            r = c.post(
                "/api/v1/dags/web_etl/runs", content=body, headers={"content-type": content_type}
            )
            assert r.status_code == 400, r.text[:300]
            assert f"over the limit of {MAX_JSON_DEPTH} levels" in r.json()["error"]
        as_string = '{"conf": "' + "[" * DEEP + "]" * DEEP + '"}'
        r = c.post("/api/v1/dags/web_etl/runs", content=as_string)
        assert r.status_code == 400 and f"limit of {MAX_JSON_DEPTH} levels" in r.json()["error"]
        at_limit = '{"conf": ' + '{"a":' * (MAX_JSON_DEPTH - 2) + "1" + "}" * (MAX_JSON_DEPTH - 2)
        r = c.post("/api/v1/dags/web_etl/runs", content=at_limit + "}")
        assert r.status_code == 400 and "problems" in r.json()  # parsed: refused by the params
        assert c.get("/api/v1/dags/web_etl/runs").json()["runs"] == before


def test_a_deep_conf_in_the_trigger_form_is_a_400_page_naming_the_limit(web: WebServer) -> None:
    c, csrf = login(web)
    try:
        conf = '{"a": ' + "[" * DEEP + "]" * DEEP + "}"  # about 10 KB, as a browser sends it
        r = c.post("/dags/web_etl/trigger", data={"csrf_token": csrf, "conf": conf})
        assert r.status_code == 400
        assert "text/html" in r.headers["content-type"]
        assert f"over the limit of {MAX_JSON_DEPTH} levels" in r.text
    finally:
        c.close()


def test_an_oversized_form_in_the_browser_is_a_413_page_with_the_way_back(web: WebServer) -> None:
    c, csrf = login(web)
    try:
        conf = '{"pad": "' + "x" * 100_000 + '"}'
        r = c.post(
            "/dags/web_etl/trigger",
            data={"csrf_token": csrf, "conf": conf},
            headers={"accept": "text/html"},
        )
        assert r.status_code == 413
        assert "text/html" in r.headers["content-type"]
        assert "over the limit of" in r.text and 'href="/dags/web_etl"' in r.text
    finally:
        c.close()


def test_a_body_of_whitespace_is_no_body(web: WebServer) -> None:
    with web.client() as c:
        for content_type in ("application/json", "text/plain"):
            r = c.post(
                "/api/v1/dags/web_etl/runs/no-such-run/cancel",
                content=b" \n\t ",
                headers={"content-type": content_type},
            )
            assert r.status_code == 404, r.text  # the body was read as {}; the run is unknown


def test_unknown_fields_are_named_without_echoing_the_body(web: WebServer) -> None:
    body = {f"{i}{'k' * 1000}": 1 for i in range(40)}
    with web.client() as c:
        r = c.post("/api/v1/dags/web_etl/runs", json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error.startswith("invalid request: unknown field(s) 0kkk") and "and 30 more" in error
    assert len(error) < 2_000


# ---------------------------------------------------------------------- every route, fuzzed

# what an HTTP client can send as a header value (printable ASCII, no surrounding spaces)
_PRINTABLE = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=60
).map(str.strip)
_ANY_TEXT = st.text(max_size=80)
_IDS = st.one_of(
    st.sampled_from(["web_etl", "r1", "extract", "1", "..", ".", "%00", "a b", "x" * 300]),
    _ANY_TEXT.filter(bool),
)
_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["1e309", "-0", "NaN", "Infinity", "0x10", "", " 1", "1.5"]),
)
# deep nesting is what breaks recursive parsers: drawn often, not left to chance
_DEPTH = st.one_of(
    st.sampled_from([MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 1_000, 5_000, 12_000]),
    st.integers(min_value=1, max_value=12_000),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)
_FIELDS = st.sampled_from(
    ["conf", "run_id", "reason", "terminate", "tasks", "downstream", "only_failed", "state"]
    + ["task_id", "csrf_token", "paused", "username", "password", "next"]
)
_DEEP_BODIES = st.one_of(
    _DEPTH.map(lambda n: "[" * n + "]" * n),
    _DEPTH.map(lambda n: '{"conf":' + '{"a":' * n + "1" + "}" * n + "}"),
    _DEPTH.map(lambda n: '{"conf": "' + "{" * n + '"}'),
    _DEPTH.map(lambda n: '{"tasks": ' + "[" * n + "]" * n + "}"),
    _DEPTH.map(lambda n: "conf=" + quote('{"a":' + "[" * n + "]" * n + "}")),  # a form field
)
_OTHER_BODIES = st.one_of(
    st.binary(max_size=300),
    st.dictionaries(_FIELDS, _JSON, max_size=5).map(lambda d: json.dumps(d, allow_nan=True)),
    st.dictionaries(_FIELDS, _ANY_TEXT, max_size=5).map(
        lambda d: "&".join(f"{quote(k)}={quote(v)}" for k, v in d.items())
    ),
    st.sampled_from(["", "null", "{}", "[]", '"x"', "{", '{"conf": NaN}', "\ufeff{}"]),
)
_BODIES = st.one_of(_DEEP_BODIES, _OTHER_BODIES)  # half of them deep
_CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "multipart/form-data",
            "text/plain",
            "application/json; charset=latin-1",
        ]
    ),
    _PRINTABLE,
)
_QUERY_NAMES = st.sampled_from(
    ["limit", "offset", "cursor", "runs", "map_index", "try_number", "state", "trigger"]
    + ["dag_id", "run_id", "q", "include_replayed", "next", "error"]
)


def _routes(web: WebServer) -> list[tuple[str, str]]:
    """Every (method, path) the served app answers, read from the app itself (FastAPI keeps an
    included router as one entry holding the router: walked into)."""
    found: list[tuple[str, str]] = []

    def walk(routes: Sequence[BaseRoute]) -> None:
        for route in routes:
            included = getattr(route, "original_router", None)
            if included is not None:
                walk(included.routes)
            elif isinstance(route, Route):
                found.extend((m, route.path) for m in sorted(route.methods or ()) if m != "HEAD")

    walk(web.server.config.app.routes)
    return found


def _fill(path: str, values: list[str]) -> str:
    params = re.findall(r"{(\w+)}", path)
    for name, value in zip(params, values, strict=False):
        path = path.replace("{" + name + "}", quote(value, safe=""), 1)
    return path


@st.composite
def _requests(draw: st.DrawFn, routes: list[tuple[str, str]]) -> dict[str, Any]:
    method, template = draw(st.sampled_from(routes))
    path = _fill(template, [draw(_IDS) for _ in range(template.count("{"))])
    query = draw(st.dictionaries(_QUERY_NAMES, st.one_of(_NUMBERS, _ANY_TEXT), max_size=4))
    headers = {"content-type": draw(_CONTENT_TYPES)}
    extra = draw(
        st.dictionaries(
            st.sampled_from(["accept", "origin", "referer", "x-csrf-token", "cookie", "host"]),
            _PRINTABLE,
            max_size=3,
        )
    )
    headers.update(extra)
    body = draw(_BODIES)
    return {
        "method": method,
        "url": path,
        "params": query,
        "headers": headers,
        "content": body.encode() if isinstance(body, str) else body,
    }


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_route_answers_5xx_to_hostile_input(web: WebServer, data: st.DataObject) -> None:
    request = data.draw(_requests(_routes(web)))
    with web.client() as c:
        try:
            r = c.request(**request)
        except httpx.RemoteProtocolError as exc:  # the server hung up: as bad as a 500
            raise AssertionError(f"{request['method']} {request['url']}: {exc}") from exc
    assert r.status_code < 500, (request["method"], request["url"], r.status_code, r.text[:300])


def test_every_route_answers_a_deep_body_and_odd_query_below_500(web: WebServer) -> None:
    routes = _routes(web)
    assert len(routes) >= 35  # the API's and the pages': the walk found them all
    paths = {p for _, p in routes}
    assert {"/api/v1/dags/{dag_id}/runs", "/dags/{dag_id}/trigger", "/login", "/healthz"} <= paths
    deep = '{"conf": ' + "[" * DEEP + "]" * DEEP + "}"
    with web.client() as c:
        for method, template in routes:
            url = _fill(template, ["web_etl", "r1", "extract", "1"][: template.count("{")])
            for content_type in ("application/json", "application/x-www-form-urlencoded"):
                r = c.request(
                    method,
                    url,
                    content=deep,
                    params={"limit": "1e309", "cursor": str(2**80), "map_index": "-2"},
                    headers={"content-type": content_type},
                )
                assert r.status_code < 500, (method, url, r.status_code, r.text[:300])
