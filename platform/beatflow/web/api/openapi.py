"""The OpenAPI document as the app really answers: FastAPI's, without the 422 answers it lists
for every validated route (this app answers every bad request with 400 and ErrorBody)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

UNUSED_SCHEMAS = ("HTTPValidationError", "ValidationError")


def openapi_document(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        doc = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        for path in doc.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        schemas = doc.get("components", {}).get("schemas", {})
        for name in UNUSED_SCHEMAS:
            schemas.pop(name, None)
        app.openapi_schema = doc
    return app.openapi_schema
