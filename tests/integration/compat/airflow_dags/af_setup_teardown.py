import pendulum
from airflow.exceptions import AirflowSkipException
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, setup, task, teardown

START = pendulum.datetime(2024, 1, 1, tz="UTC")

# the work fails: the teardown still runs, and the run fails (the work's failure is the run's)
with DAG("af_teardown_after_failure", schedule=None, start_date=START):
    create = BashOperator(task_id="create", bash_command="echo made").as_setup()
    work = BashOperator(task_id="work", bash_command="exit 3")
    delete = BashOperator(task_id="delete", bash_command="echo gone").as_teardown(setups=create)
    create >> work >> delete

# the teardown fails: the run still succeeds (a teardown's failure is not the run's); the tasks
# made in the `with` block run between the setup and the teardown
with DAG("af_teardown_fails_quietly", schedule=None, start_date=START):

    @setup
    def make():
        return "cluster-1"

    @teardown
    def cleanup(cluster):
        raise RuntimeError(f"could not delete {cluster}")

    @task
    def middle():
        return "worked"

    with cleanup(make()):
        middle()

# the setup is skipped: so is its teardown
with DAG("af_teardown_skipped", schedule=None, start_date=START):

    @setup
    def nothing_to_make():
        raise AirflowSkipException("nothing to set up")

    @teardown
    def nothing_to_clean():
        return "cleaned"

    nothing_to_make() >> nothing_to_clean()
