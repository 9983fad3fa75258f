"""The reconciler's settings: defaults that meet the 3-minute bound, bad values reported."""

from __future__ import annotations

import pytest

from beatflow.errors import SettingsError
from beatflow.settings import Settings


def test_defaults_resume_a_lost_canvas_well_within_three_minutes() -> None:
    s = Settings()
    # silent for the stall time, noticed within one interval, a dead lease holder replaced
    # within three: the worst case before the resume is sent
    worst = s.reconcile_stall_seconds + s.reconcile_interval + 3 * s.reconcile_interval
    assert worst <= 120 and s.reconcile_enabled


def test_a_stall_time_not_above_the_lease_is_refused_naming_both_variables() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {"BEATFLOW_RECONCILE_STALL_SECONDS": "10", "BEATFLOW_LEASE_SECONDS": "30"}
        )
    assert "BEATFLOW_RECONCILE_STALL_SECONDS=10.0 must exceed BEATFLOW_LEASE_SECONDS" in str(
        caught.value
    )


def test_every_bad_reconciler_value_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {
                "BEATFLOW_RECONCILE_INTERVAL": "0",
                "BEATFLOW_RECONCILE_MAX_RESUMES": "-1",
                "BEATFLOW_RECONCILE_BATCH": "lots",
                "BEATFLOW_RECONCILE_ENABLED": "maybe",
            }
        )
    assert len(caught.value.problems) == 4
