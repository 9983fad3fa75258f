"""The assets' tables (data-aware scheduling, migrations 0025 and 0026), beside ``models.py``
(which keeps the rest of the schema under the store's module size): they are on the same
``Base.metadata`` once this module is imported, as ``store/assets.py`` and the migrations'
environment do."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from beatflow.store.models import Base, BigId, Json


class AssetEvent(Base):
    """One update of an asset (migration 0025): by a task run's success (``source_key``
    ``task:<dedupe key>#<try>/<asset>``, so a redelivered task records it once) or from
    outside (``beatflow assets emit``, the API)."""

    __tablename__ = "asset_events"
    __table_args__ = (
        sa.UniqueConstraint("source_key"),
        sa.Index(None, "asset", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    asset: Mapped[str] = mapped_column(sa.String(250))
    source_key: Mapped[str] = mapped_column(sa.String(1300))
    dag_id: Mapped[str | None] = mapped_column(sa.String(250))
    run_id: Mapped[str | None] = mapped_column(sa.String(250))
    task_id: Mapped[str | None] = mapped_column(sa.String(250))
    actor: Mapped[str | None] = mapped_column(sa.String(250))
    extra: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime]


class AssetConsumption(Base):
    """An asset event consumed by a DAG's asset-triggered run (migration 0025): the primary
    key lets each event trigger each DAG at most once; written in the run's transaction."""

    __tablename__ = "asset_consumptions"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    event_id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(250))
    consumed_at: Mapped[datetime]


class AssetEventTotal(Base):
    """The asset events of an asset and source ("task" or "external") that prune deleted
    (migration 0026): the exporter's counter is this plus the rows left."""

    __tablename__ = "asset_event_totals"

    asset: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    source: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    events: Mapped[int] = mapped_column(sa.BigInteger)


class AssetRunTotal(Base):
    """The asset-triggered runs of a DAG whose last consumption prune deleted (migration
    0026): the exporter's counter is this plus the runs the consumptions left still name."""

    __tablename__ = "asset_run_totals"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    runs: Mapped[int] = mapped_column(sa.BigInteger)


asset_events: sa.Table = AssetEvent.__table__  # type: ignore[assignment]
asset_consumptions: sa.Table = AssetConsumption.__table__  # type: ignore[assignment]
asset_event_totals: sa.Table = AssetEventTotal.__table__  # type: ignore[assignment]
asset_run_totals: sa.Table = AssetRunTotal.__table__  # type: ignore[assignment]
