"""Store engine helpers: UTC handling, strict JSON, SQLite connection set-up, error translation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from beatflow.errors import StoreError, StoreUnavailableError
from beatflow.store.engine import (
    create_engine,
    dumps_json,
    require_aware,
    sqlite_path,
    translate_errors,
)


def test_aware_datetimes_are_converted_to_utc_and_naive_ones_refused() -> None:
    local = datetime(2026, 6, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert require_aware(local, "x") == datetime(2026, 6, 1, 10, tzinfo=UTC)
    with pytest.raises(StoreError, match=r"logical_date=2026-06-01T12:00:00 has no time zone"):
        require_aware(datetime(2026, 6, 1, 12), "logical_date")


def test_json_is_strict_about_nan_and_unknown_types() -> None:
    assert dumps_json({"a": [1, None]}) == '{"a":[1,null]}'
    with pytest.raises(ValueError):
        dumps_json(float("inf"))
    with pytest.raises(TypeError):
        dumps_json({1, 2})


def test_sqlite_paths_are_read_from_the_url() -> None:
    assert sqlite_path("sqlite:///.beatflow/beatflow.db") == Path(".beatflow/beatflow.db")
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("sqlite:///:memory:") is None


def test_a_sqlite_file_is_opened_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        engine.dispose()


def test_operational_errors_become_store_unavailable_and_others_store_error() -> None:
    url = "postgresql+psycopg://user:hunter2@db.example/beatflow"
    with pytest.raises(StoreUnavailableError) as unavailable, translate_errors(url, "testing"):
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    assert "hunter2" not in str(unavailable.value)
    assert "unavailable while testing: connection refused" in str(unavailable.value)
    with pytest.raises(StoreError) as refused, translate_errors(url, "testing"):
        raise sa.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))
    assert not isinstance(refused.value, StoreUnavailableError)
    assert isinstance(refused.value.__cause__, sa.exc.IntegrityError)


def test_a_url_that_does_not_parse_is_reported_without_echoing_it() -> None:
    with pytest.raises(StoreError) as caught, translate_errors("::not a url::", "opening"):
        raise sa.exc.ArgumentError("bad url")
    assert "(unparseable URL)" in str(caught.value)
