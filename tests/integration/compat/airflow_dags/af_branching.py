from airflow.exceptions import AirflowSkipException
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.operators.python import BranchPythonOperator, ShortCircuitOperator
from airflow.sdk import DAG, task
from airflow.utils.trigger_rule import TriggerRule

with DAG("af_branching", schedule=None, params={"path": "left"}) as dag:
    choose = BranchPythonOperator(
        task_id="choose", python_callable=lambda params: f"go_{params['path']}"
    )
    left, right = EmptyOperator(task_id="go_left"), EmptyOperator(task_id="go_right")
    join = EmptyOperator(task_id="join", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    choose >> [left, right] >> join

    @task.short_circuit
    def worth_it():
        return 0

    gated = EmptyOperator(task_id="gated")
    worth_it() >> gated
    open_gate = ShortCircuitOperator(task_id="open_gate", python_callable=lambda: True)
    open_gate >> EmptyOperator(task_id="after_gate")

    @task
    def skip_me():
        raise AirflowSkipException("nothing to do")

    skip_me()
    BashOperator(task_id="bash_skips", bash_command="exit 99")
