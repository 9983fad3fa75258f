"""Trigger rules: `publish` runs only if both branches succeed; `cleanup` runs whatever
happened upstream (all_done); `alert` runs only when something failed (one_failed)."""

from beatflow import DAG, task


@task
def fetch_a() -> int:
    return 1


@task(retries=0)
def fetch_b(ctx) -> int:
    if ctx.params["fail"]:
        raise RuntimeError("source b is down")
    return 2


@task
def publish(a: int, b: int) -> int:
    return a + b


@task(trigger_rule="all_done")
def cleanup() -> str:
    return "cleaned"


@task(trigger_rule="one_failed")
def alert() -> str:
    return "paged the on-call"


with DAG("example_trigger_rules", schedule=None, params={"fail": False}, tags=["example"]):
    a, b = fetch_a(), fetch_b()
    p = publish(a, b)
    p >> cleanup()
    [a, b] >> alert()
