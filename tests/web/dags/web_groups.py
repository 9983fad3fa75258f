"""A DAG the web UI tests drive for task groups (boxes in the graph that fold into one node, rows
grouped in the grid) and params (the trigger form built from them)."""

from beatflow import DAG, Param, TaskGroup, task


@task
def pull(ctx) -> list[int]:
    return list(range(ctx.params["batch"]))


@task
def clean(rows: list[int]) -> list[int]:
    return [r for r in rows if r >= 0]


@task
def write(rows: list[int], ctx) -> str:
    return f"{len(rows)} rows to {ctx.params['region']} on {ctx.params['day']}"


with DAG(
    "web_groups",
    params={
        "region": Param("eu", enum=["eu", "us"], description="where the rows go"),
        "batch": Param(
            10, type="integer", minimum=1, maximum=100, title="Batch size", description="rows"
        ),
        "day": Param("2026-01-01", type="string", pattern=r"^\d{4}-\d{2}-\d{2}$"),
        "dry_run": Param(False, type="boolean", description="write nothing"),
    },
):
    with TaskGroup("extract") as extract:
        rows = clean(pull())
    with TaskGroup("load") as load:
        write(rows)
    extract >> load
