"""The helpers each shared concern has exactly one of: time (beatflow.times), PostgreSQL URLs
(settings.psycopg_url), the walk over task arguments (dag.model.map_leaves), cycle paths
(DAG.find_cycle) and kombu's Redis queue layout (beatflow.queues)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from kombu.transport.redis import PRIORITY_STEPS, Channel

from beatflow import DAG, task
from beatflow.dag.model import Ref, map_leaves
from beatflow.queues import QueueLayout
from beatflow.settings import psycopg_url
from beatflow.times import as_utc, parse_instant

PARIS = ZoneInfo("Europe/Paris")


@task
def a() -> None:
    return None


def test_a_naive_time_is_read_in_the_given_zone_and_an_aware_one_converted() -> None:
    assert as_utc(datetime(2026, 7, 1, 12, 0)) == datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert as_utc(datetime(2026, 7, 1, 12, 0), PARIS) == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
    aware = datetime(2026, 1, 1, 12, 0, tzinfo=PARIS)
    assert as_utc(aware).tzinfo is UTC and as_utc(aware) == aware


def test_an_iso_instant_parses_to_utc_and_garbage_is_a_value_error() -> None:
    assert parse_instant("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_instant("2026-11-01T10:00+01:00") == datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_instant("yesterday")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql://u@h:5433/db", "postgresql+psycopg://u@h:5433/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("not a url", "not a url"),
    ],
)
def test_postgres_urls_get_the_psycopg_driver_and_others_are_left_alone(
    url: str, expected: str
) -> None:
    assert psycopg_url(url) == expected


def test_map_leaves_rebuilds_lists_tuples_and_dicts_and_maps_only_leaves() -> None:
    value = [Ref("x"), (1, {"k": Ref("y"), "n": [2]}), "s"]
    got = map_leaves(value, lambda v: f"<{v.task_id}>" if isinstance(v, Ref) else v)
    assert got == ["<x>", (1, {"k": "<y>", "n": [2]}), "s"]
    assert isinstance(got[1], tuple) and isinstance(got[1][1]["n"], list)


def test_a_cycle_path_starts_at_its_smallest_task_and_follows_the_edges() -> None:
    with DAG("d") as dag:
        x, m, z = (a.override(task_id=t)() for t in "amz")
        z >> x  # "a" hangs below the cycle: the search meets the cycle at z first
        z >> m >> z
    assert dag.model.find_cycle() == ["m", "z", "m"]
    with DAG("d2") as dag2:
        b, c, d, e = (a.override(task_id=t)() for t in "bcde")
        e >> c >> d >> b >> c
    assert dag2.model.find_cycle() == ["b", "c", "d", "b"]
    with DAG("acyclic") as ok:
        a.override(task_id="x")() >> a.override(task_id="y")()
    assert ok.model.find_cycle() == []


def test_the_queue_layout_is_kombus() -> None:
    layout = QueueLayout()
    assert layout.priority_steps == tuple(PRIORITY_STEPS)
    assert layout.lists("q") == ["q"] + [f"q{Channel.sep}{s}" for s in PRIORITY_STEPS[1:]]
    prefixed = QueueLayout(prefix="p:")
    assert prefixed.keys(["a", "b"])[0] == "p:a" and prefixed.unacked == "p:unacked"
