"""A DAG next to the plain tasks: both kinds run on the same worker."""

from beatflow import DAG, task


@task
def hello() -> str:
    return "hello"


with DAG("p_dag"):
    hello()
