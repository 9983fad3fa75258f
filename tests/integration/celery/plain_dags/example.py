"""A DAG next to the plain tasks: both kinds run on the same worker."""

from celery import current_app, group

from beatflow import DAG, task


@task
def hello() -> str:
    return "hello"


with DAG("p_dag"):
    hello()


@task
def broken() -> None:
    raise ValueError("broken")


def _after(rule: str, name: str):
    return task(trigger_rule=rule)(lambda: rule).override(task_id=name)


with DAG("p_shape"):
    # a chain next to a fan-out/fan-in: the root chord's header holds a chord whose body is a
    # group, which Celery's Redis backend joined on stored results (a hang before the fix)
    hello.override(task_id="first")() >> _after("all_done", "then")()
    parts = [broken(), _after("all_done", "fine")()]
    parts >> _after("all_done", "join")()
    parts >> _after("all_success", "strict")()


@task
def waits_on_plain_tasks() -> list[int]:
    # user code that sends plain tasks and waits on their results (Celery's own way)
    sigs = [current_app.signature("billing.add", args=(i, i)) for i in range(3)]
    return group(sigs).apply_async().get(timeout=30, disable_sync_subtasks=False)


with DAG("p_waits"):
    waits_on_plain_tasks()
