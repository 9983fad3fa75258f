"""The RabbitMQ fault kinds of ``beatflow chaos --broker rabbitmq``, on the run's own node
(``rabbitmq_server.py``): SIGKILL it and start it again (durable queues and persistent messages
come back from its disk; unacked deliveries return to their queues), a clean restart, and a
memory alarm that blocks every publisher for a few seconds. With RabbitMQ as the broker the
Redis faults of ``faults.py`` still apply: Redis keeps the beat's lock, schedules and results."""

from __future__ import annotations

from beatflow.chaos import faults
from beatflow.chaos.faults import Fault, FaultContext
from beatflow.chaos.rabbitmq_server import ChaosRabbitMQ


def _node(ctx: FaultContext) -> ChaosRabbitMQ:
    if ctx.rabbitmq is None:
        raise RuntimeError("a RabbitMQ fault in a run whose broker is not RabbitMQ")
    return ctx.rabbitmq


def kill_rabbitmq(ctx: FaultContext) -> str:
    node = _node(ctx)
    node.kill()
    ctx.sleep(ctx.rng.uniform(1, 3))
    node.start()
    return "SIGKILL RabbitMQ node, started again (its disk kept)"


def restart_rabbitmq(ctx: FaultContext) -> str:
    node = _node(ctx)
    node.stop()
    node.start()
    return "RabbitMQ node stopped cleanly (rabbitmqctl stop) and started again"


def block_rabbitmq_publishers(ctx: FaultContext) -> str:
    """A memory alarm (watermark 0): RabbitMQ blocks every connection that publishes until it
    clears; consumers keep receiving."""
    node = _node(ctx)
    node.memory_alarm(True)
    try:
        ctx.sleep(ctx.rng.uniform(3, 6))
    finally:
        node.memory_alarm(False)
    return "RabbitMQ memory alarm for a few seconds (publishers blocked)"


RABBITMQ_FAULTS: dict[str, Fault] = {
    "kill_rabbitmq": kill_rabbitmq,
    "restart_rabbitmq": restart_rabbitmq,
    "block_rabbitmq_publishers": block_rabbitmq_publishers,
}
BROKERS = ("redis", "rabbitmq")


def faults_for(broker: str) -> dict[str, Fault]:
    """Every fault kind of a run on ``broker``: the shared ones, plus RabbitMQ's on RabbitMQ."""
    if broker == "rabbitmq":
        return {**faults.FAULTS, **RABBITMQ_FAULTS}
    return dict(faults.FAULTS)
