"""`beatflow db prune --older-than`: ages parse as days, hours or minutes; anything else is a
clear usage error before the database is touched."""

from __future__ import annotations

from datetime import timedelta

import click
import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.cli.db import Age


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        (" 7d ", timedelta(days=7)),
    ],
)
def test_ages_are_whole_days_hours_or_minutes(text: str, age: timedelta) -> None:
    assert Age().convert(text, None, None) == age


@pytest.mark.parametrize("text", ["30", "d", "1.5d", "-3d", "3w", "30 days", ""])
def test_anything_else_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(click.BadParameter, match=r"e\.g\. 30d, 12h, 90m"):
        Age().convert(text, None, None)


def test_a_bad_age_on_the_command_line_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["db", "prune", "--older-than", "3x"])
    assert result.exit_code == 2
    assert "Invalid value for '--older-than'" in result.output
    assert "'3x' is not an age" in result.output


def test_db_is_a_registered_command_with_its_subcommands() -> None:
    result = CliRunner().invoke(main, ["db", "--help"])
    assert result.exit_code == 0
    for name in ("upgrade", "current", "prune"):
        assert name in result.output
