import pendulum
from airflow.sdk import DAG, Asset, task, task_group

START = pendulum.datetime(2024, 1, 1, tz="UTC")
ORDERS = Asset("af://orders")

with DAG("af_mapping", schedule=None, start_date=START):

    @task
    def nums():
        return [1, 2]

    @task
    def add(x, y):
        return x + y

    @task
    def total(values):
        return sum(values)

    @task
    def far(ti=None):
        return ti.xcom_pull(task_ids="nums")

    @task(pool="af_pool", outlets=[ORDERS])
    def pooled():
        return "in the pool"

    @task.skip_if(lambda context: context["ti"].task_id == "not_today", skip_message="not today")
    @task
    def not_today():
        return 1

    @task.run_if(lambda context: context["params"].get("go", True))
    @task.bash
    def gated():
        return "echo ran"

    @task_group
    def grouped(num):
        @task
        def plus_one(num):
            return num + 1

        @task
        def twice(num):
            return num * 2

        return twice(plus_one(num))

    grouped.expand(num=[1, 2, 3])
    not_today()
    gated()
    sums = add.expand(x=nums(), y=[10, 20])
    total(sums) >> far() >> pooled()
    add.override(task_id="add_kw").expand_kwargs([{"x": 1, "y": 2}, {"x": 3, "y": 4}])

with DAG("af_on_orders", schedule=[ORDERS], start_date=START):

    @task
    def consume():
        return "consumed"

    consume()
