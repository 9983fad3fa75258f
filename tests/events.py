"""Celery's own event receiver for tests: every event the broker carries while the block runs,
with each message's body as it came (a list for a ``<group>.multi`` message)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.events.receiver import EventReceiver

from tests.procs import wait_for

PROBE = "test-probe"


class _Bodies(EventReceiver):  # type: ignore[misc]
    """Celery's event receiver, keeping each message's body as it came (list or one)."""

    def __init__(self, *args: Any, bodies: list[object], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies = bodies

    def _receive(self, body: object, message: Any, list: Any = list, isinstance: Any = isinstance):
        self.bodies.append(body)
        super()._receive(body, message)


@dataclass
class Captured:
    events: list[dict[str, Any]] = field(default_factory=list)  # one per event, as handled
    bodies: list[object] = field(default_factory=list)  # one per message

    def of_type(self, type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type]

    def bodies_carrying(self, uuids: set[str], type: str = "task-sent") -> list[object]:
        """The bodies, as they came (a list for a ``.multi`` message), of the messages holding
        ``type`` events of the tasks ``uuids``."""
        return [body for body in self.bodies if _mine(body, uuids, type)]

    def messages_carrying(
        self, uuids: set[str], type: str = "task-sent"
    ) -> list[list[dict[str, Any]]]:
        """The messages holding ``type`` events of the tasks ``uuids``, each as the list of
        those events."""
        return [_mine(body, uuids, type) for body in self.bodies_carrying(uuids, type)]


def _mine(body: object, uuids: set[str], type: str) -> list[dict[str, Any]]:
    events = body if isinstance(body, list) else [body]
    return [e for e in events if e["type"] == type and e.get("uuid") in uuids]


@contextlib.contextmanager
def captured_events(app: Celery) -> Iterator[Captured]:
    """Receive ``app``'s events in a thread from the moment it is listening (a probe event it
    sends comes back) until the block ends."""
    captured = Captured()
    with app.connection_for_read() as conn:
        receiver = _Bodies(
            conn, bodies=captured.bodies, handlers={"*": captured.events.append}, app=app
        )
        thread = threading.Thread(target=receiver.capture, kwargs={"limit": None}, daemon=True)
        thread.start()
        try:
            with app.events.default_dispatcher() as probe:

                def listening() -> bool:
                    probe.send(PROBE)
                    return bool(captured.of_type(PROBE))

                wait_for(listening, 30, interval=0.2, message="the event receiver listening")
            yield captured
        finally:
            receiver.should_stop = True
            thread.join(10)
