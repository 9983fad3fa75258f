"""Connection URLs, which carry the Redis and PostgreSQL passwords, may come from files (Docker
and Kubernetes secrets) instead of the environment, and stay masked wherever settings show."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.errors import SettingsError
from beatflow.settings import Settings

DB = "postgresql+psycopg://app:Db-Secret-1@db.internal:5432/beatflow"
BROKER = "redis://:Redis-Secret-2@redis.internal:6379/0"


def test_broker_and_database_urls_are_read_from_secret_files(tmp_path: Path) -> None:
    (tmp_path / "db").write_text(DB + "\n")
    (tmp_path / "broker").write_text(BROKER)
    settings = Settings.from_env(
        {
            "BEATFLOW_DATABASE_URL_FILE": str(tmp_path / "db"),
            "BEATFLOW_BROKER_URL_FILE": str(tmp_path / "broker"),
        }
    )
    assert settings.database_url == DB and settings.broker_url == BROKER
    shown = repr(settings) + str(settings.masked())
    assert "Db-Secret-1" not in shown and "Redis-Secret-2" not in shown


def test_a_url_given_both_ways_or_an_unreadable_file_is_refused_without_the_secret(
    tmp_path: Path,
) -> None:
    (tmp_path / "db").write_text(DB)
    with pytest.raises(SettingsError) as both:
        Settings.from_env(
            {"BEATFLOW_DATABASE_URL": DB, "BEATFLOW_DATABASE_URL_FILE": str(tmp_path / "db")}
        )
    assert "keep one" in str(both.value) and "Db-Secret-1" not in str(both.value)
    with pytest.raises(SettingsError) as missing:
        Settings.from_env({"BEATFLOW_BROKER_URL_FILE": str(tmp_path / "nope")})
    assert "cannot read the secret file" in str(missing.value)
