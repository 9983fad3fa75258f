import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.providers.standard.sensors.external_task import ExternalTaskSensor
from airflow.sdk import DAG, task

START = pendulum.datetime(2024, 1, 1, tz="UTC")

with DAG("af_target", schedule=None, start_date=START):

    @task
    def double(dag_run=None):
        return dag_run.conf["n"] * 2

    double()

with DAG("af_controller", schedule=None, start_date=START):
    trigger = TriggerDagRunOperator(
        task_id="trigger",
        trigger_dag_id="af_target",
        conf={"n": 21},
        logical_date="{{ logical_date }}",
        wait_for_completion=True,
        poke_interval=0.3,
        deferrable=True,
    )
    seen = ExternalTaskSensor(
        task_id="seen",
        external_dag_id="af_target",
        external_task_id="double",
        deferrable=True,
        poll_interval=0.3,
        timeout=60,
    )
    [trigger, seen] >> EmptyOperator(task_id="end")
