"""Branching and skips: `choose_load` follows the full or the incremental load (the other is
skipped), `report` joins them (none_failed_min_one_success: it runs after whichever ran),
`worth_publishing` short-circuits `publish` when no rows arrived, and `archive` skips itself
(raise Skip) unless the run asks for it."""

from beatflow import DAG, Skip, task


@task
def count_new_rows(ctx) -> int:
    return int(ctx.params["new_rows"])


@task.branch
def choose_load(rows: int) -> str:
    return "full_load" if rows > 1000 else "incremental_load"


@task
def full_load(rows: int) -> str:
    return f"reloaded the table ({rows} new rows)"


@task
def incremental_load(rows: int) -> str:
    return f"appended {rows} rows"


@task(trigger_rule="none_failed_min_one_success")
def report() -> str:
    return "report refreshed"


@task.short_circuit
def worth_publishing(rows: int) -> int:
    return rows  # 0 is falsy: everything downstream is skipped


@task
def publish(rows: int) -> str:
    return f"published {rows} rows"


@task
def archive(ctx) -> str:
    if not ctx.params["archive"]:
        raise Skip("archiving is off for this run")
    return "archived"


with DAG(
    "example_branching",
    schedule=None,
    params={"new_rows": 42, "archive": False},
    tags=["example"],
):
    rows = count_new_rows()
    loads = [full_load(rows), incremental_load(rows)]
    choose_load(rows) >> loads
    done = report()
    loads >> done
    done >> publish(worth_publishing(rows))
    archive()
