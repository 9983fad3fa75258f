"""Child-process side of the concurrent start-up test: open a Store and make it ready, all
processes at once (like a worker and two beats starting together)."""

from __future__ import annotations

from typing import Any

from beatflow.store import Store


def ensure_ready_at_once(url: str, barrier: Any, report: Any) -> None:
    store = Store(url)
    barrier.wait(timeout=60)
    try:
        if url.startswith("sqlite"):
            store.ensure_ready()
        else:
            store.upgrade()
        report.put(store.current_revision())
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        report.put(f"{type(exc).__name__}: {exc}")
    finally:
        store.close()
