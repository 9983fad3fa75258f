"""The project's own tasks."""

from typing import Any

from proj.celery import app


@app.task(bind=True)
def add(self: Any, x: int, y: int) -> dict[str, Any]:
    return {"sum": x + y, "routing_key": self.request.delivery_info.get("routing_key")}
