"""Raw Celery tasks for the side-by-side benchmarks (imported by the bench worker with -I)."""

from __future__ import annotations

from celery import Celery, shared_task


@shared_task(name="raw.noop", acks_late=True)
def noop(*_: object) -> None:
    return None


def bind(app: Celery) -> None:
    """Make sure ``app`` has the raw tasks (shared tasks attach to every app)."""
    assert "raw.noop" in app.tasks
