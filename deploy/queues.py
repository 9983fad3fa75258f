"""The KEDA triggers that count a Celery queue's Redis lists (or its RabbitMQ queue).

A queue's waiting messages sit in one Redis list per priority step (the layout is
:class:`beatflow.queues.QueueLayout`, what the exporter reads too). A KEDA ``redis`` trigger on
the bare name alone undercounts (kedacore/keda#7066), so a ScaledObject needs one trigger per
list, summed with ``advanced.scalingModifiers.formula``. The k8s and Helm tests compare rendered
objects to this.

On RabbitMQ a queue is one queue whatever the priorities: one ``rabbitmq`` trigger per queue
(AMQP, ``QueueLength``: the ready messages, as the exporter's passive declare reads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from beatflow.queues import DEFAULT_PRIORITY_STEPS, QueueLayout

STEPS: tuple[int, ...] = DEFAULT_PRIORITY_STEPS
LAYOUT = QueueLayout()  # beatflow's broker transport options keep kombu's defaults


@dataclass(frozen=True, slots=True)
class BrokerList:
    """One Redis list of a queue: its priority step, key and KEDA trigger name."""

    queue: str
    step: int

    @property
    def key(self) -> str:
        return LAYOUT.list_key(self.queue, self.step)

    @property
    def trigger_name(self) -> str:
        # Trigger names are identifiers in KEDA's formula language: no dashes or dots.
        return f"{_ident(self.queue)}_p{self.step}"


def broker_lists(queue: str, steps: Sequence[int] = STEPS) -> tuple[BrokerList, ...]:
    """Every Redis list that holds ``queue``'s waiting messages, highest priority first."""
    return tuple(BrokerList(queue, step) for step in steps)


def broker_keys(queues: Sequence[str], steps: Sequence[int] = STEPS) -> list[str]:
    """The Redis keys of all lists of all ``queues`` (what ``LLEN`` must be summed over)."""
    return [lst.key for q in queues for lst in broker_lists(q, steps)]


def scaling_formula(queues: Sequence[str], steps: Sequence[int] = STEPS) -> str:
    """KEDA ``scalingModifiers.formula`` summing every list trigger of ``queues``."""
    return " + ".join(lst.trigger_name for q in queues for lst in broker_lists(q, steps))


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def rabbitmq_trigger_name(queue: str) -> str:
    """The name of ``queue``'s ``rabbitmq`` trigger (its ready messages) in KEDA's formula."""
    return f"{_ident(queue)}_ready"


def rabbitmq_formula(queues: Sequence[str]) -> str:
    """KEDA ``scalingModifiers.formula`` summing the ``rabbitmq`` trigger of each queue."""
    return " + ".join(rabbitmq_trigger_name(q) for q in queues)
