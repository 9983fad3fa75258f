"""The notifier outbox through the API and the UI against a real worker, Redis and PostgreSQL:
newest first, filtered by DAG, run, state and event, paged; bad filters are a 400; a viewer may
read it; the Notifications page shows the same rows."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from beatflow.notify.base import event_key
from beatflow.store import Store
from tests.web.conftest import WebServer
from tests.web.test_roles import VIEWER_TOKEN
from tests.web.test_roles import roles_web as roles_web  # the app with roles, shared

pytestmark = pytest.mark.slow


def add(store: Store, dag_id: str, run_id: str, task_id: str | None, event: str) -> str:
    """Write an outbox row as a worker does for a notifier's event (its first notifier)."""
    context: dict[str, Any] = {
        "event": event,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": -1,
        "try_number": 2 if task_id else None,
        "state": "failed" if event == "failure" else event,
    }
    key = event_key(context, 0)
    payload = {"context": context, "index": 0}
    assert store.add_notification(key, dag_id=dag_id, run_id=run_id, kind=event, payload=payload)
    return key


@pytest.fixture(scope="module")
def outbox(web: WebServer) -> tuple[str, dict[str, str]]:
    """A DAG id of the test's own and its three events: sent, failed, pending (newest)."""
    store = web.cluster.store
    dag_id = f"web_notes_{uuid.uuid4().hex[:6]}"
    sent = add(store, dag_id, "r1", "load", "retry")
    assert store.take_notification(sent) is not None
    store.end_notification(sent, state="sent", tries=1)
    failed = add(store, dag_id, "r1", "load", "failure")
    assert store.take_notification(failed) is not None
    store.end_notification(failed, state="failed", tries=3, error="WebhookError: answered 500")
    pending = add(store, dag_id, "r2", None, "success")  # the DAG run's end
    return dag_id, {"sent": sent, "failed": failed, "pending": pending}


def test_the_outbox_is_listed_newest_first_and_filtered(web: WebServer, outbox) -> None:
    dag_id, keys = outbox
    with web.client() as c:
        r = c.get("/api/v1/notifications", params={"dag_id": dag_id})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [n["event_key"] for n in body["notifications"]] == [
            keys["pending"], keys["failed"], keys["sent"]
        ]  # fmt: skip
        assert body["next_offset"] is None
        failed = body["notifications"][1]
        assert {k: failed[k] for k in ("dag_id", "run_id", "task_id", "map_index", "try_number",
                                       "event", "notifier", "state", "tries", "error")} == {
            "dag_id": dag_id, "run_id": "r1", "task_id": "load", "map_index": -1,
            "try_number": 2, "event": "failure", "notifier": 0, "state": "failed", "tries": 3,
            "error": "WebhookError: answered 500",
        }  # fmt: skip
        assert failed["ended_at"] is not None and failed["claimed_at"] is not None
        assert "payload" not in failed and "context" not in failed  # the conf stays with the run
        run_end = body["notifications"][0]
        assert (run_end["task_id"], run_end["try_number"], run_end["state"]) == (
            None, None, "pending"
        )  # fmt: skip
        assert run_end["ended_at"] is None

        def keys_of(**params: object) -> list[str]:
            r = c.get("/api/v1/notifications", params={"dag_id": dag_id, **params})
            assert r.status_code == 200, r.text
            return [n["event_key"] for n in r.json()["notifications"]]

        assert keys_of(state="failed") == [keys["failed"]]
        assert keys_of(event="success") == [keys["pending"]]
        assert keys_of(run_id="r1") == [keys["failed"], keys["sent"]]
        assert keys_of(run_id="r2", state="sent") == []
        first = c.get("/api/v1/notifications", params={"dag_id": dag_id, "limit": 2}).json()
        assert len(first["notifications"]) == 2 and first["next_offset"] == 2
        rest = c.get("/api/v1/notifications", params={"dag_id": dag_id, "offset": 2}).json()
        assert [n["event_key"] for n in rest["notifications"]] == [keys["sent"]]
        assert rest["next_offset"] is None

        for bad in ({"state": "lost"}, {"event": "boom"}, {"dag_id": "../x"}, {"limit": 0},
                    {"offset": -1}, {"run_id": "a b"}):  # fmt: skip
            r = c.get("/api/v1/notifications", params=bad)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]

        page = c.get("/notifications", params={"dag_id": dag_id, "state": "failed"})
        assert page.status_code == 200
        assert f'data-notification="{keys["failed"]}"' in page.text
        assert keys["sent"] not in page.text and keys["pending"] not in page.text
        everything = c.get("/notifications", params={"dag_id": dag_id, "state": ""})
        assert everything.status_code == 200 and keys["sent"] in everything.text
        assert c.get("/notifications", params={"state": "lost"}).status_code == 400
    with web.client(token=None) as anonymous:
        assert anonymous.get("/api/v1/notifications").status_code == 401


def test_a_viewer_reads_the_outbox(roles_web: WebServer, outbox) -> None:
    dag_id, keys = outbox
    with roles_web.client(token=VIEWER_TOKEN) as c:
        r = c.get("/api/v1/notifications", params={"dag_id": dag_id, "state": "failed"})
        assert r.status_code == 200, r.text
        assert [n["event_key"] for n in r.json()["notifications"]] == [keys["failed"]]
        page = c.get("/notifications", params={"dag_id": dag_id})
        assert page.status_code == 200 and keys["pending"] in page.text
