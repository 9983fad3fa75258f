"""How kombu's Redis transport lays a Celery queue out in Redis, in one place: one list per
priority step — the bare queue name for step 0, ``<queue>\\x06\\x16<step>`` for the others —
all behind kombu's ``global_keyprefix``, and the ``unacked`` hash that holds every delivered,
unacknowledged message. The exporter sums a queue's lists; the deploy tooling gives KEDA one
trigger per list (``deploy/queues.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kombu.transport.redis import PRIORITY_STEPS, Channel

from beatflow.settings import Settings

DEFAULT_SEP: str = Channel.sep
DEFAULT_PRIORITY_STEPS: tuple[int, ...] = tuple(PRIORITY_STEPS)
DEFAULT_UNACKED_KEY: str = Channel.unacked_key


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """kombu's names for a queue's Redis lists (from the broker transport options)."""

    sep: str = DEFAULT_SEP
    priority_steps: tuple[int, ...] = DEFAULT_PRIORITY_STEPS
    prefix: str = ""  # kombu's global_keyprefix
    unacked_key: str = DEFAULT_UNACKED_KEY

    @classmethod
    def from_settings(cls, settings: Settings) -> QueueLayout:
        options: Mapping[str, Any] = settings.celery_config().get("broker_transport_options", {})
        return cls(
            sep=str(options.get("sep", DEFAULT_SEP)),
            priority_steps=tuple(
                int(s) for s in options.get("priority_steps", DEFAULT_PRIORITY_STEPS)
            ),
            prefix=str(options.get("global_keyprefix", "")),
            unacked_key=str(options.get("unacked_key", DEFAULT_UNACKED_KEY)),
        )

    def list_key(self, queue: str, step: int) -> str:
        """The Redis list holding ``queue``'s messages of priority step ``step``."""
        return self.prefix + (f"{queue}{self.sep}{step}" if step else queue)

    def lists(self, queue: str) -> list[str]:
        """Every Redis list holding messages of ``queue``, one per priority step."""
        return [self.list_key(queue, step) for step in self.priority_steps]

    def keys(self, queues: Sequence[str]) -> list[str]:
        """The lists of all ``queues`` (what ``LLEN`` must be summed over)."""
        return [key for queue in queues for key in self.lists(queue)]

    @property
    def unacked(self) -> str:
        """kombu's hash of delivered, unacknowledged messages."""
        return self.prefix + self.unacked_key
