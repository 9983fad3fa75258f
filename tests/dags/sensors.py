"""Test DAGs for sensors: a file sensor in reschedule mode (a file the test creates), one that
counts its pokes (killed between them), one in poke mode, timeouts that fail or skip, and the
built-in SQL, HTTP and other-DAG sensors."""

import os

from _marks import MARKS, mark

from beatflow import DAG, ExternalRun, FileSensor, HttpSensor, PokeResult, SqlSensor, task


@task
def after(value) -> str:
    return f"after {value}"


@task
def quick(ctx) -> str:
    mark(f"quick-{ctx.run_id}")
    return "quick"


with DAG("t_sensor_file"):
    after(FileSensor(path=str(MARKS / "ready-{run_id}*"), poke_interval=0.3, timeout=120))


@task.sensor(poke_interval=1.0, timeout=300)
def counted(ctx):
    mark(f"poke-{ctx.run_id}")
    ready = MARKS / f"ready-{ctx.run_id}"
    return PokeResult(ready.exists(), "ready")


@task
def once(value: str, ctx) -> str:
    mark(f"once-{ctx.run_id}")
    return value


with DAG("t_sensor_counted"):
    once(counted())


with DAG("t_sensor_quick"):
    quick()


@task.sensor(mode="poke", poke_interval=0.2, timeout=120)
def in_place(ctx):
    mark(f"poke-{ctx.run_id}")
    return (MARKS / f"ready-{ctx.run_id}").exists() and {"found": True}


with DAG("t_sensor_poke"):
    after(in_place())


@task.sensor(poke_interval=0.2, timeout=1.0, retries=3)
def never(ctx) -> bool:
    mark(f"poke-{ctx.run_id}")
    return False


@task.sensor(poke_interval=0.2, timeout=1.0, soft_fail=True)
def never_soft(ctx) -> bool:
    mark(f"poke-{ctx.run_id}")
    return False


@task.sensor(mode="poke", poke_interval=0.2, timeout=1.0)
def never_in_place(ctx) -> bool:
    return False


with DAG("t_sensor_timeout"):
    after(never())

with DAG("t_sensor_soft"):
    after(never_soft())

with DAG("t_sensor_poke_timeout"):
    after(never_in_place())


@task
def upstream_work() -> str:
    return "upstream done"


with DAG("t_sensor_upstream"):
    upstream_work()

with DAG("t_sensor_external"):
    after(ExternalRun("t_sensor_upstream", poke_interval=0.3, timeout=120))

with DAG("t_sensor_external_task"):
    after(ExternalRun("t_sensor_upstream", "upstream_work", poke_interval=0.3, timeout=120))

with DAG("t_sensor_sql"):
    after(
        SqlSensor(
            os.environ.get("BEATFLOW_DATABASE_URL", "sqlite://"),
            "SELECT note FROM sensor_flags WHERE name = :name",
            parameters={"name": "go"},
            poke_interval=0.3,
            timeout=120,
        )
    )

with DAG("t_sensor_http", params={"url": "http://127.0.0.1:9/"}):
    after(
        HttpSensor(
            "{params[url]}",
            response_check=lambda status, body: b"ready" in body,
            poke_interval=0.3,
            timeout=120,
        )
    )


@task.sensor(poke_interval=12, timeout=300)
def slow(ctx):
    mark(f"poke-{ctx.run_id}")
    return (MARKS / f"ready-{ctx.run_id}").exists()


with DAG("t_sensor_slow"):
    after(slow())


@task.sensor(poke_interval=3600, timeout=7200)
def hourly(ctx) -> bool:
    mark(f"poke-{ctx.run_id}")
    return False


with DAG("t_sensor_hourly"):  # an hour between pokes: held in countdowns of at most 900 s
    after(hourly())
