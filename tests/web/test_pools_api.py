"""Pools through the API and the UI against a real worker, Redis and PostgreSQL: PUT creates
and resizes (audited with the caller), GET lists used/queued/free, DELETE removes (404 after);
a viewer may read but not change pools; the pools page lists them."""

from __future__ import annotations

import pytest

from tests.web.conftest import WebServer
from tests.web.test_roles import VIEWER_TOKEN
from tests.web.test_roles import roles_web as roles_web  # the app with roles, shared

pytestmark = pytest.mark.slow


def test_pools_are_set_listed_and_deleted_through_the_api(web: WebServer) -> None:
    with web.client() as c:
        r = c.put("/api/v1/pools/warehouse", json={"slots": 4, "description": "the DWH"})
        assert r.status_code == 200, r.text
        assert r.json()["slots"] == 4 and r.json()["free"] == 4
        r = c.put("/api/v1/pools/warehouse", json={"slots": 2, "reason": "maintenance"})
        assert r.status_code == 200 and r.json()["description"] == "the DWH"
        listed = {p["name"]: p for p in c.get("/api/v1/pools").json()["pools"]}
        assert listed["warehouse"]["slots"] == 2
        assert (listed["warehouse"]["used"], listed["warehouse"]["queued"]) == (0, 0)
        assert c.put("/api/v1/pools/warehouse", json={"slots": -1}).status_code == 400
        assert c.put("/api/v1/pools/warehouse", json={"slots": "3"}).status_code == 400
        assert c.put("/api/v1/pools/bad%20name", json={"slots": 3}).status_code in (400, 422)
        page = c.get("/pools")
        assert page.status_code == 200 and 'data-pool="warehouse"' in page.text
        actions = [a["action"] for a in c.get("/api/v1/audit").json()["audit"]]
        assert actions[:2] == ["pool_set", "pool_set"]
        assert c.delete("/api/v1/pools/warehouse").json() == {"name": "warehouse", "deleted": True}
        assert c.delete("/api/v1/pools/warehouse").status_code == 404
        assert "warehouse" not in {p["name"] for p in c.get("/api/v1/pools").json()["pools"]}
        assert c.get("/api/v1/audit").json()["audit"][0]["action"] == "pool_delete"
    with web.client(token=None) as anonymous:
        assert anonymous.get("/api/v1/pools").status_code == 401
        assert anonymous.put("/api/v1/pools/x", json={"slots": 1}).status_code == 401


def test_a_viewer_reads_pools_but_cannot_change_them(roles_web: WebServer) -> None:
    with roles_web.client(token=VIEWER_TOKEN) as c:
        assert c.get("/api/v1/pools").status_code == 200
        refused = c.put("/api/v1/pools/viewers", json={"slots": 1})
        assert refused.status_code == 403
        assert c.delete("/api/v1/pools/viewers").status_code in (403, 404)
        assert "viewers" not in {p["name"] for p in c.get("/api/v1/pools").json()["pools"]}
