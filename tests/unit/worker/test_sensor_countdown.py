"""The countdown of a sensor's next poke: the wait that is due, capped by half Redis's
visibility timeout and by COUNTDOWN_MAX_SECONDS, below RabbitMQ's default consumer_timeout."""

from __future__ import annotations

import pytest

from beatflow.execution.backoff import COUNTDOWN_MAX_SECONDS, countdown

RABBITMQ_CONSUMER_TIMEOUT = 1800.0


@pytest.mark.parametrize(
    ("due", "visibility_timeout", "expected"),
    [
        (30.0, 3600, 30.0),  # a short wait: as it is
        (3600.0, 3600, 900.0),  # an hour: in countdowns of 900 s (half the visibility is 1,800)
        (3600.0, 600, 300.0),  # a short visibility timeout caps it lower
        (-2.0, 3600, 0.0),  # overdue: at once
    ],
)
def test_the_countdown_of_the_next_poke(due, visibility_timeout, expected) -> None:
    assert countdown(due, visibility_timeout) == expected


def test_the_cap_leaves_a_margin_below_rabbitmqs_consumer_timeout() -> None:
    assert COUNTDOWN_MAX_SECONDS <= RABBITMQ_CONSUMER_TIMEOUT / 2
