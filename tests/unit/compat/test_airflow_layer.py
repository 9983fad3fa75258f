"""The Airflow layer as the loader uses it: ``airflow`` resolves to beatflow's layer only while a
DAG module runs (a real Airflow is never shadowed), a missing feature is named per file, and
Airflow's vocabulary becomes a beatflow DAG (schedule, retries, edges, mapping)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.dag.loader import load_dags

DAG_FILE = """
import pendulum
from datetime import timedelta
from airflow.sdk import DAG, Label, chain, cross_downstream, task
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG(
    "af_unit",
    schedule="@hourly",
    start_date=pendulum.datetime(2024, 1, 1, tz="Europe/Paris"),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=3),
                  "retry_exponential_backoff": True, "owner": "data"},
    tags=["x"],
) as dag:
    @task
    def numbers():
        return [1, 2, 3]

    @task
    def double(x, factor):
        return x * factor

    doubled = double.partial(factor=2).expand(x=numbers())
    start, a, b, c, d = (EmptyOperator(task_id=t) for t in ("start", "a", "b", "c", "d"))
    chain(start, [a, b])
    cross_downstream([a, b], [c, d])
    say = BashOperator(
        task_id="say", bash_command="echo {{ ds }}", execution_timeout=timedelta(seconds=9)
    )
    c >> Label("then") >> say
    doubled >> say
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_an_airflow_dag_file_becomes_a_beatflow_dag(tmp_path: Path) -> None:
    write(tmp_path, "af.py", DAG_FILE)
    bag = load_dags(tmp_path)
    assert bag.ok, bag.errors
    dag = bag.dags["af_unit"]
    assert dag.schedule is not None and dag.schedule.cron == "0 * * * *"
    assert dag.timezone.key == "Europe/Paris" and dag.tags == ("x",)
    t = dag.tasks
    assert t["double"].map_over == "numbers"
    assert t["c"].upstream == {"a", "b"} and t["d"].upstream == {"a", "b"}
    assert t["say"].upstream == {"c", "double"}
    assert t["say"].time_limit == 9
    retry = t["say"].retry
    assert (retry.retries, retry.delay, retry.backoff) == (2, 3.0, 2.0)


def test_airflow_names_live_only_while_the_loader_runs_a_module(tmp_path: Path) -> None:
    write(tmp_path, "af.py", DAG_FILE)
    assert load_dags(tmp_path).ok
    assert not [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
    with pytest.raises(ImportError):
        importlib.import_module("airflow.sdk")


def test_a_real_airflow_is_never_shadowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "site" / "airflow"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(real.parent))
    dags = tmp_path / "dags"
    dags.mkdir()
    write(dags, "af.py", DAG_FILE)
    try:
        import airflow  # the "real" one

        assert load_dags(dags).ok
        assert sys.modules["airflow"] is airflow
        assert importlib.import_module("airflow").REAL is True
    finally:
        sys.modules.pop("airflow", None)
    assert load_dags(dags).ok  # not imported before: found on the path afterwards, not ours
    assert importlib.import_module("airflow").REAL is True
    sys.modules.pop("airflow", None)


def test_a_missing_feature_is_named_per_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        "k8s.py",
        "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator\n",
    )
    write(tmp_path, "assets.py", "import pendulum\nfrom airflow.sdk import DAG, AssetAlias\n")
    write(tmp_path, "venv.py", "from airflow.sdk import task\n\n@task.docker\ndef s(): ...\n")
    write(tmp_path, "good.py", DAG_FILE)
    bag = load_dags(tmp_path)
    errors = {Path(e.file).name: e for e in bag.errors}
    assert set(errors) == {"k8s.py", "assets.py", "venv.py"} and "af_unit" in bag.dags
    assert "airflow.providers.cncf.kubernetes" in errors["k8s.py"].message
    assert "is not supported by beatflow's Airflow layer" in errors["k8s.py"].message
    assert "airflow.sdk.AssetAlias (asset aliases)" in errors["assets.py"].message
    assert "@task.docker" in errors["venv.py"].message
    assert errors["assets.py"].line == 2 and errors["venv.py"].line == 3
    result = CliRunner().invoke(
        main, ["dags", "check"], env={"BEATFLOW_DAGS_FOLDER": str(tmp_path)}
    )
    assert result.exit_code == 1
    for name in ("k8s.py", "assets.py", "venv.py"):
        line = next(x for x in result.output.splitlines() if name in x)
        assert "not supported by beatflow's Airflow layer" in line


def test_schedules_map_and_what_is_not_there_says_so(tmp_path: Path) -> None:
    head = "import datetime\nfrom airflow import DAG\n"
    write(tmp_path, "delta.py", head + 'DAG("d1", schedule=datetime.timedelta(hours=2))\n')
    write(tmp_path, "manual.py", head + 'DAG("d2", schedule=None)\n')
    write(
        tmp_path,
        "once.py",
        head + 'DAG("d3", schedule="@once", start_date=datetime.datetime(2024, 1, 1))\n',
    )
    write(tmp_path, "always.py", head + 'DAG("d4", schedule="@continuous")\n')
    bag = load_dags(tmp_path)
    assert bag.dags["d1"].schedule.interval == timedelta(hours=2)  # type: ignore[union-attr]
    assert bag.dags["d2"].schedule is None
    assert bag.dags["d3"].schedule is not None
    assert [e.file.endswith("always.py") for e in bag.errors] == [True]
    assert "'@continuous'" in bag.errors[0].message


GROUPS_FILE = """
import pendulum
from airflow.sdk import DAG, Param, task
from airflow.utils.task_group import TaskGroup
from airflow.decorators import task_group
from airflow.operators.empty import EmptyOperator

def noted(context):
    noted.seen.append((context["ti"].task_id, context["dag_run"].run_id))
noted.seen = []

with DAG(
    "af_groups",
    schedule="@once",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    params={"n": Param(3, type="integer", minimum=1, description="how many")},
    default_args={"owner": "data", "on_failure_callback": noted},
    on_success_callback=noted,
) as dag:
    start = EmptyOperator(task_id="start")
    with TaskGroup("extract", default_args={"retries": 4}) as extract:
        a = EmptyOperator(task_id="a")
        b = EmptyOperator(task_id="b", params={"k": Param(1, type="integer")})
        a >> b

    @task_group
    def load():
        @task
        def put():
            return 1

        put()

    end = EmptyOperator(task_id="end")
    start >> extract >> load() >> end
"""


def test_task_groups_params_and_callbacks_map(tmp_path: Path) -> None:
    write(tmp_path, "groups.py", GROUPS_FILE)
    bag = load_dags(tmp_path)
    assert not bag.errors, bag.errors
    dag = bag.dags["af_groups"]
    assert list(dag.tasks) == ["start", "extract.a", "extract.b", "end", "load.put"]
    assert set(dag.groups) == {"extract", "load"}
    assert dag.groups["extract"].tasks == ["extract.a", "extract.b"]
    up = {t: spec.order_upstream for t, spec in dag.tasks.items()}
    assert up["extract.a"] == {"start"} and up["extract.b"] == {"extract.a"}
    assert up["load.put"] == {"extract.b"} and up["end"] == {"load.put"}
    assert dag.tasks["extract.a"].retry.retries == 4 and dag.tasks["start"].retry.retries == 0
    assert dag.params["n"].minimum == 1 and dag.params["n"].description == "how many"
    assert dag.params["n"].problem(0) is not None and dag.params["n"].problem(5) is None
    assert dag.schedule is not None
    callback = dag.tasks["extract.a"].callbacks["failure"][0]
    callback({"dag_id": "af_groups", "run_id": "r1", "task_id": "extract.a", "event": "failure"})
    (success,) = dag.callbacks["success"]
    success({"dag_id": "af_groups", "run_id": "r2", "event": "success"})
    assert callback.__wrapped__.seen == [("extract.a", "r1"), (None, "r2")]  # type: ignore[attr-defined]


def test_what_the_mapped_features_still_lack_is_named(tmp_path: Path) -> None:
    head = "import datetime\nfrom airflow.sdk import DAG, Param, TaskGroup\n"
    write(tmp_path, "strlen.py", head + 'DAG("p1", params={"s": Param("x", minLength=2)})\n')
    write(
        tmp_path,
        "flat.py",
        head + 'with DAG("p2"):\n    TaskGroup("g", prefix_group_id=False)\n',
    )
    bag = load_dags(tmp_path)
    messages = sorted(e.message for e in bag.errors)
    assert len(messages) == 2
    # minLength is checked (by jsonschema), and the default refused where it is written
    assert "default 'x' is refused: it must fit the JSON Schema keyword minLength=2" in messages[0]
    assert "prefix_group_id=False" in messages[1]


def test_clock_branches_decide_on_the_day_and_the_time() -> None:
    from datetime import UTC, datetime, time

    from beatflow.compat.airflow.clock import (
        BranchDateTimeOperator,
        BranchDayOfWeekOperator,
        WeekDay,
    )

    wednesday_noon = datetime(2024, 1, 10, 12, tzinfo=UTC)
    day = BranchDayOfWeekOperator.__new__(BranchDayOfWeekOperator)
    day.week_days = WeekDay.validate_week_day({WeekDay.SATURDAY, "Sunday"})
    assert not day.test(wednesday_noon) and day.test(datetime(2024, 1, 13, tzinfo=UTC))
    span = BranchDateTimeOperator.__new__(BranchDateTimeOperator)
    span.lower, span.upper = time(15), time(0)  # across midnight
    assert not span.test(wednesday_noon)
    assert span.test(datetime(2024, 1, 10, 16, tzinfo=UTC))
    assert WeekDay.SATURDAY == "saturday"


def test_an_external_python_callable_goes_as_its_source_without_decorators(
    tmp_path: Path,
) -> None:
    from beatflow.compat.airflow.external import function_source

    write(
        tmp_path,
        "ext.py",
        "import sys\nfrom airflow.sdk import DAG, task\n\n"
        'with DAG("af_ext"):\n'
        "    for n in (1, 2):\n\n"
        '        @task.external_python(task_id=f"t{n}", python=sys.executable)\n'
        "        def inner(x=2):\n"
        '            """Doc."""\n'
        "            return x * 2\n\n"
        "        inner()\n",
    )
    write(
        tmp_path,
        "lam.py",
        "import sys\nfrom airflow.providers.standard.operators.python import"
        " ExternalPythonOperator\nfrom airflow.sdk import DAG\n\n"
        'with DAG("af_lam"):\n'
        '    ExternalPythonOperator(task_id="l", python=sys.executable, python_callable=len)\n',
    )
    bag = load_dags(tmp_path)
    assert list(bag.dags["af_ext"].tasks) == ["t1", "t2"]
    runner = bag.dags["af_ext"].tasks["t1"].fn
    source = function_source(runner.op.python_callable)  # type: ignore[attr-defined]
    assert source == 'def inner(x=2):\n    """Doc."""\n    return x * 2\n'
    (err,) = bag.errors
    assert err.file.endswith("lam.py") and "cannot be read" in err.message
