"""Data-aware scheduling: ``load_orders`` updates the asset ``warehouse.orders`` each time it
succeeds; ``example_assets_consumer`` runs once per update of both ``warehouse.orders`` and
``warehouse.customers`` (the latter updated from outside:
``beatflow assets emit warehouse.customers``). Its run's conf lists the triggering events."""

from __future__ import annotations

from datetime import timedelta

from beatflow import DAG, Asset, context, task

orders = Asset("warehouse.orders")
customers = Asset("warehouse.customers")


@task(outlets=[orders])
def load_orders() -> int:
    return 42  # rows written to warehouse.orders


@task
def report() -> list[str]:
    events = context().params.get("asset_events", [])
    return [f"{e['asset']} #{e['id']}" for e in events]


with DAG("example_assets_producer", schedule=timedelta(hours=1), tags=("example", "assets")):
    load_orders()

with DAG("example_assets_consumer", schedule=[orders, customers], tags=("example", "assets")):
    report()
