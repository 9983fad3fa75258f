"""The API's OpenAPI document as served: it validates, it says what the app really answers
(typed responses, 400s not 422s, the bearer scheme), and a client generated from it at test
time triggers a run and follows it to success against a real worker."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from tests.procs import wait_for
from tests.web.conftest import TOKEN, WebServer

pytestmark = pytest.mark.slow

CLIENT_PACKAGE = "beatflow_api_client"


@pytest.fixture(scope="module")
def document(web: WebServer) -> dict[str, Any]:
    with web.client() as c:
        r = c.get("/api/v1/openapi.json")
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
    ]


def test_the_document_validates(document: dict[str, Any]) -> None:
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema


def test_the_document_lists_the_answers_the_app_gives(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "token",
        "description": (
            "a token of BEATFLOW_WEB_TOKENS (admin) or BEATFLOW_WEB_TOKEN_HASHES (its role): "
            "a viewer may GET, an operator may also change runs and DAGs, an admin anything"
        ),
    }
    assert schemes["session"]["in"] == "cookie"
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    ops = _operations(document)
    assert len(ops) >= 20
    for method, path, op in ops:
        where = f"{method} {path}"
        assert "422" not in op["responses"], where
        for status in ("400", "401", "403"):
            ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/ErrorBody", where
        assert {"bearer": []} in op["security"], where
        oks = [s for s in op["responses"] if s.startswith("2")]
        assert oks, where  # one answer, or two (a backfill's dry run is a 200, its start a 201)
        for ok in oks:
            assert "$ref" in op["responses"][ok]["content"]["application/json"]["schema"], where
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            name = body["schema"]["$ref"].rsplit("/", 1)[1]
            assert schemas[name]["additionalProperties"] is False, where
    trigger = document["paths"]["/api/v1/dags/{dag_id}/runs"]["post"]
    assert trigger["operationId"] == "trigger_run"
    assert {"409", "413"} <= set(trigger["responses"])


def test_every_operation_documents_the_403_of_a_role_too_weak(document: dict[str, Any]) -> None:
    error = document["components"]["schemas"]["ErrorBody"]["properties"]
    assert {"role", "needed"} <= set(error)
    for method, path, op in _operations(document):
        assert "role" in op["responses"]["403"]["description"], f"{method} {path}"
    purge = document["paths"]["/api/v1/dead-letters/purge"]["post"]
    assert purge["requestBody"]["required"] is True
    assert "admins only" in purge["description"]
    me = document["paths"]["/api/v1/me"]["get"]["responses"]["200"]["content"]
    assert me["application/json"]["schema"]["$ref"] == "#/components/schemas/Me"


def _generate_client(document: dict[str, Any], where: Path) -> Any:
    spec = where / "openapi.json"
    spec.write_text(json.dumps(document))
    config = where / "config.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run on the generated code
    out = where / CLIENT_PACKAGE
    tool = Path(sys.executable).with_name("openapi-python-client")
    done = subprocess.run(
        [
            str(tool),
            "generate",
            "--path",
            str(spec),
            "--output-path",
            str(out),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(CLIENT_PACKAGE)
    finally:
        sys.path.remove(str(where))


def test_a_generated_client_triggers_a_run_and_follows_it_to_success(
    web: WebServer, document: dict[str, Any], tmp_path: Path
) -> None:
    package = _generate_client(document, tmp_path)
    trigger_run = importlib.import_module(f"{CLIENT_PACKAGE}.api.default.trigger_run")
    get_run = importlib.import_module(f"{CLIENT_PACKAGE}.api.default.get_run")
    list_dags = importlib.import_module(f"{CLIENT_PACKAGE}.api.default.list_dags")
    models = importlib.import_module(f"{CLIENT_PACKAGE}.models")
    try:
        client = package.AuthenticatedClient(base_url=web.url, token=TOKEN)
        with client as c:
            dags = list_dags.sync(client=c)
            assert "web_etl" in [d.dag_id for d in dags.dags]
            body = models.TriggerBody.from_dict({"conf": {"rows": 5}, "reason": "client"})
            answer = trigger_run.sync_detailed(dag_id="web_etl", client=c, body=body)
            assert answer.status_code == 201, answer.content
            run = answer.parsed
            assert isinstance(run, models.DagRun) and run.state in ("queued", "running")

            def finished() -> Any:
                now = get_run.sync(dag_id="web_etl", run_id=run.run_id, client=c)
                assert isinstance(now, models.RunDetail), now
                return now if now.state not in ("queued", "running") else None

            final = wait_for(finished, 60.0, 0.2, "the run to finish")
            assert final.state == "success", web.cluster.log_tail()
            assert [t.task_id for t in final.tasks] == ["extract", "total", "publish"]
            assert final.conf.to_dict() == {"rows": 5, "fail_first": False}

            refused = trigger_run.sync_detailed(
                dag_id="web_etl",
                client=c,
                body=models.TriggerBody.from_dict({"conf": {"rowz": 1}}),
            )
            assert refused.status_code == 400
            assert isinstance(refused.parsed, models.ErrorBody)
            assert refused.parsed.problems
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == CLIENT_PACKAGE]:
            del sys.modules[name]
