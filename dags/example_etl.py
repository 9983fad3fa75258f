"""Hourly ETL: extract -> transform -> load, where load upserts keyed by the task run's
dedupe key, so a redelivered or replayed load never writes twice."""

import json
import sqlite3
from datetime import datetime
from pathlib import Path

from beatflow import DAG, context, task


@task(retries=2, retry_delay=1.0)
def extract() -> list[dict]:
    ctx = context()
    hour = ctx.logical_date.strftime("%Y-%m-%dT%H") if ctx.logical_date else "manual"
    return [{"sensor": f"s{i}", "hour": hour, "reading": 20.0 + i * 0.5} for i in range(5)]


@task
def transform(rows: list[dict]) -> dict:
    readings = [r["reading"] for r in rows]
    return {"count": len(readings), "mean": sum(readings) / len(readings), "max": max(readings)}


@task(retries=3)
def load(summary: dict, ctx) -> str:
    # Idempotent upsert: the dedupe key is the primary key, so a second delivery overwrites
    # the same row instead of adding one.
    db = Path(ctx.params["output_db"])
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS hourly_summary (dedupe_key TEXT PRIMARY KEY, "
            "run_id TEXT, summary TEXT)"
        )
        conn.execute(
            "INSERT INTO hourly_summary VALUES (?, ?, ?) ON CONFLICT(dedupe_key) "
            "DO UPDATE SET summary = excluded.summary",
            (ctx.dedupe_key, ctx.run_id, json.dumps(summary)),
        )
    ctx.log.info("loaded summary of %d readings", summary["count"])
    return ctx.dedupe_key


with DAG(
    "example_etl",
    schedule="0 * * * *",
    start_date=datetime(2026, 1, 1),
    timezone="UTC",
    catchup=False,
    max_active_runs=1,
    tags=["example", "etl"],
    params={"output_db": ".beatflow/example_etl.db"},
    description="Hourly extract -> transform -> load with an idempotent upsert.",
):
    load(transform(extract()))
