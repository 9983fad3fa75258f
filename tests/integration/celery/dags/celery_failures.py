"""DAGs whose tasks fail for good, inside a chain and inside a chord, with downstream tasks
that run by trigger rule; the signal receivers come with them."""

import _receivers  # noqa: F401 - connects the worker's signal receivers

from beatflow import DAG, task


@task(retries=1, retry_delay=0.1)
def boom() -> None:
    raise ValueError("boom in a chain")


@task(retries=0)
def burst() -> None:
    raise KeyError("burst in a chord")


@task
def fine() -> str:
    return "fine"


def _after(rule: str, name: str):
    return task(trigger_rule=rule)(lambda: rule).override(task_id=name)


with DAG("c_fail"):
    # A chain (boom fails after a retry) next to a chord (burst fails at once).
    boom() >> _after("all_success", "strict")() >> _after("all_done", "chain_last")()
    [burst(), fine()] >> _after("all_done", "join")()
