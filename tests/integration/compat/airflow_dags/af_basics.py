import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

with DAG(
    "af_basics",
    schedule="@daily",
    start_date=pendulum.datetime(2021, 1, 1, tz="UTC"),
    catchup=False,
    params={"x": 3},
) as dag:

    @task(multiple_outputs=True)
    def extract():
        return {"a": 1, "b": 2}

    @task
    def add(a, b, ti=None, **kwargs):
        ti.xcom_push(key="k", value=a + b)
        return a + b + kwargs["params"]["x"]

    e = extract()
    s = add(e["a"], e["b"])
    b = BashOperator(
        task_id="say",
        bash_command="echo {{ ds }} {{ params.x }} {{ ti.xcom_pull(task_ids='add', key='k') }}",
    )
    s >> b >> EmptyOperator(task_id="end")


async def nap(seconds):
    """An async callable (Airflow 3.2+ runs them natively)."""
    import asyncio

    await asyncio.sleep(seconds)
    return f"slept {seconds}"


with DAG("af_async", schedule=None, start_date=pendulum.datetime(2021, 1, 1, tz="UTC")):
    from airflow.providers.standard.operators.python import PythonOperator

    @task
    async def awaited(n):
        return n * 2

    PythonOperator(task_id="napped", python_callable=nap, op_kwargs={"seconds": 0.01})
    awaited(21)
