"""A DAG the web UI tests drive for skips: a branch that follows one task and skips the other,
and a task that raises Skip with its reason."""

from beatflow import DAG, Skip, task


@task.branch
def choose() -> str:
    return "taken"


@task
def taken() -> str:
    return "taken"


@task
def not_taken() -> str:
    return "not taken"


@task
def nothing_to_do() -> str:
    raise Skip("nothing to do today")


with DAG("web_branch"):
    choose() >> [taken(), not_taken()]
    nothing_to_do()
