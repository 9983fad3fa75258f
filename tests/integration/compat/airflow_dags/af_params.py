"""An Airflow DAG file whose Params use JSON-Schema formats and keywords (checked by jsonschema at
every trigger), and a Param without a default (a value is required)."""

import pendulum
from airflow.sdk import DAG, Param, task

with DAG(
    "af_params",
    schedule=None,
    start_date=pendulum.datetime(2021, 1, 1, tz="UTC"),
    params={
        "day": Param("2024-01-10", type="string", format="date"),
        "at": Param("2024-01-10T12:00:00+00:00", type="string", format="date-time"),
        "owner": Param("data@example.org", type="string", format="email"),
        "label": Param(type="string", minLength=5, maxLength=20, section="shown only"),
        "sizes": Param([1, 2], type="array", items={"type": "integer"}, minItems=1),
        "note": Param("free text", type=["string", "null"], format="multiline"),
    },
) as dag:

    @task
    def show(params=None, dag_run=None):
        return {"params": dict(params), "conf": dict(dag_run.conf)}

    show()
