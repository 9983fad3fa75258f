"""Params: typed, bounded and documented; checked at every trigger (CLI, API, web form, schedule)
and turned into the web UI's trigger form. The daily run takes the defaults."""

from datetime import datetime

from beatflow import DAG, Param, task


@task
def export(ctx) -> dict[str, object]:
    p = ctx.params
    rows = list(range(p["batch_size"]))
    return {"region": p["region"], "day": p["day"], "rows": 0 if p["dry_run"] else len(rows)}


with DAG(
    "example_params",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    tags=["example"],
    params={
        "region": Param("eu", enum=["eu", "us", "apac"], description="which warehouse"),
        "batch_size": Param(
            100,
            type="integer",
            minimum=1,
            maximum=10_000,
            title="Batch size",
            description="rows per export",
        ),  # fmt: skip
        "day": Param(
            "2026-01-01",
            type="string",
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            description="the day to export, YYYY-MM-DD",
        ),  # fmt: skip
        "dry_run": Param(False, type="boolean", description="count, write nothing"),
    },
):
    export()
