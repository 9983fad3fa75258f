"""Test DAGs for control flow: a branch (chosen by conf), a branch that waits for the test's
release mark (killed mid-decision), short-circuits that skip everything or only the direct
downstream, and a task that raises Skip."""

import time

from _marks import MARKS, mark

from beatflow import DAG, Param, Skip, TaskGroup, task


@task.branch
def pick(ctx):
    mark(f"pick-{ctx.run_id}")
    return ctx.params["follow"]


@task
def left(ctx) -> str:
    mark(f"left-{ctx.run_id}")
    return "left"


@task
def right(ctx) -> str:
    mark(f"right-{ctx.run_id}")
    return "right"


@task
def after_left(value: str) -> str:
    return f"after {value}"


@task
def after_right(value: str) -> str:
    return f"after {value}"


@task(trigger_rule="none_failed_min_one_success")
def join(ctx) -> str:
    mark(f"join-{ctx.run_id}")
    return "joined"


@task
def also_direct() -> str:  # a direct downstream of the branch that is also below "left"
    return "also"


with DAG("t_branch", params={"follow": Param("left")}):  # an id, a list of ids or None
    chosen = pick()
    lv, rv = left(), right()
    chosen >> [lv, rv]
    after_left(lv)
    after_right(rv)
    [lv, rv] >> join()
    also = also_direct()
    chosen >> also
    lv >> also


@task
def fetch(ctx) -> str:
    mark(f"fetch-{ctx.task_id}-{ctx.run_id}")
    return ctx.task_id


with DAG("t_branch_group", params={"follow": Param("fast")}):  # a task group's id (or a task's)
    chosen = pick()
    with TaskGroup("fast") as fast:
        one, two = fetch.override(task_id="one")(), fetch.override(task_id="two")()
        two >> after_left.override(task_id="merge")(one)
    with TaskGroup("slow") as slow:
        after_right(fetch.override(task_id="one")())  # slow.one, slow.after_right
    chosen >> [fast, slow]
    [fast, slow] >> join()


@task.branch
def pick_slowly(ctx):
    mark(f"pick-start-{ctx.run_id}")
    release = MARKS / f"release-{ctx.run_id}"
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "left"


with DAG("t_branch_killed"):
    chosen = pick_slowly()
    lv, rv = left(), right()
    chosen >> [lv, rv]
    after_right(rv)
    [lv, rv] >> join()


@task.short_circuit
def check(ctx):
    return ctx.params["go"]


@task.short_circuit(ignore_downstream_trigger_rules=False)
def check_direct(ctx):
    return ctx.params["go"]


@task
def first(value) -> str:
    return f"first got {value}"


@task(trigger_rule="all_done")
def cleanup() -> str:
    return "cleaned"


with DAG("t_short", params={"go": Param(0)}):
    f = first(check())
    f >> cleanup()


with DAG("t_short_direct", params={"go": Param(0)}):
    f = first(check_direct())
    f >> cleanup()


@task
def maybe(ctx) -> str:
    if ctx.params["skip"]:
        raise Skip("no new files today")
    return "data"


@task
def load(value: str) -> str:
    return f"loaded {value}"


with DAG("t_skip_self", params={"skip": True}):
    got = maybe()
    load(got)
    got >> cleanup()


@task
def items() -> list[int]:
    return [0, 1, 2, 3]


@task
def evens_only(n: int) -> int:
    if n % 2:
        raise Skip(f"{n} is odd")
    return n


@task(trigger_rule="none_failed")
def collect(values: list) -> list:
    return values


with DAG("t_skip_map"):
    collect(evens_only.map(items()))
