"""The pages' small parts without a server: the way back out of an error, dates written one
way, JSON shown as written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from beatflow.web.limits import ApiError
from beatflow.web.pages.base import display_json, reason_given, utc_text
from beatflow.web.pages.errors import ways_back

EVERYWHERE = [("all DAGs", "/"), ("all runs", "/runs")]


def test_an_error_under_a_run_links_to_the_run_its_dag_and_the_dags_runs() -> None:
    assert ways_back("/dags/etl/runs/manual__1%2B2/cancel", 409) == [
        ("run manual__1+2", "/dags/etl/runs/manual__1%2B2"),
        ("DAG etl", "/dags/etl"),
        ("runs of etl", "/runs?dag_id=etl"),
        *EVERYWHERE,
    ]


def test_an_unknown_dag_is_not_offered_as_the_way_back() -> None:
    assert ways_back("/dags/nope", 404) == EVERYWHERE
    assert ways_back("/dags/etl/trigger", 405)[0] == ("DAG etl", "/dags/etl")


def test_an_ill_formed_id_in_the_path_is_never_linked() -> None:
    assert ways_back("/dags/..%2Fetc/runs/x/cancel", 400) == EVERYWHERE
    assert ways_back("/runs", 400) == EVERYWHERE


def test_every_date_is_written_in_utc_one_way() -> None:
    paris = timezone(timedelta(hours=1))
    assert utc_text("2026-12-06T05:11:30.827507+01:00") == "2026-12-06 04:11:30 UTC"
    assert utc_text(datetime(2026, 12, 6, 5, 11, 30, tzinfo=paris)) == "2026-12-06 04:11:30 UTC"
    assert utc_text("2026-12-06T04:11:30.846+00:00", ms=True) == "2026-12-06 04:11:30.846 UTC"
    assert utc_text(datetime(2026, 12, 6, 4, 11, 30)) == "2026-12-06 04:11:30 UTC"  # naive: UTC
    assert utc_text(None) == "–"
    assert utc_text("not a date") == "not a date"
    assert utc_text(datetime.now(UTC)).endswith(" UTC")


def test_json_for_display_keeps_the_characters_as_written() -> None:
    text = display_json({"note": "café ✓ a<b & c"})
    assert "café ✓ a<b & c" in text and "\\u" not in text


def test_a_verb_from_a_page_needs_a_reason() -> None:
    with pytest.raises(ApiError) as err:
        reason_given("   ")
    assert err.value.status == 400 and "reason" in err.value.message
    assert reason_given("  fixed  ") == "fixed"
    assert len(reason_given("x" * 900)) == 500
