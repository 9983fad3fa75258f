"""DAG, task and run ids: a safe ASCII set and a length, checked wherever an id is accepted, so
an id can become a Redis key, a metric label, a Celery task name or a file name as it is."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beatflow import ids
from beatflow.dag.authoring import DAG, task
from beatflow.errors import DagDefinitionError, InvalidIdError

SAFE = re.compile(r"[A-Za-z0-9_\-.:+]{1,200}")


@given(st.text(max_size=250))
def test_any_text_is_either_a_safe_id_or_a_clear_error(value: str) -> None:
    for check in (ids.check_dag_id, ids.check_task_id, ids.check_run_id):
        try:
            accepted = check(value)
        except InvalidIdError as exc:
            assert exc.kind in ("DAG id", "task id", "run id")
            assert str(exc).startswith(f"invalid {exc.kind}")
        else:
            assert accepted == value and SAFE.fullmatch(value)
            assert not any(c in value for c in "/ \n\t\x00;$`'\"\\*?[]{}")


@given(
    st.text(alphabet=string.ascii_letters + string.digits + "_", min_size=1, max_size=1),
    st.text(alphabet=string.ascii_letters + string.digits + "_-", max_size=199),
)
def test_letters_digits_underscore_and_dash_are_always_accepted(first: str, rest: str) -> None:
    value = first + rest  # not led by '-', which a command line would read as an option
    assert ids.check_dag_id(value) == value
    assert ids.check_task_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a" * 201,
        "a/b",
        "../etc",
        "é",
        "a b",
        "a;rm -rf",
        "$(id)",
        "x\ny",
        "a\x00",
        "*",
        "-x",
    ],
)
def test_unsafe_dag_and_task_ids_are_refused(value: str) -> None:
    with pytest.raises(InvalidIdError):
        ids.check_dag_id(value)
    with pytest.raises(InvalidIdError):
        ids.check_task_id(value)


def test_a_task_id_may_be_dotted_by_its_groups_but_a_dag_id_may_not() -> None:
    assert ids.check_task_id("etl.extract.load") == "etl.extract.load"
    assert ids.split_task_name("etl.extract.load") == ("etl", "extract.load")
    with pytest.raises(InvalidIdError):
        ids.check_dag_id("a.b")
    for bad in ("a..b", ".a", "a.", "a.-b"):
        with pytest.raises(InvalidIdError):
            ids.check_task_id(bad)


def test_run_ids_keep_the_timestamps_the_beat_makes_but_not_its_prefixes_when_manual() -> None:
    scheduled = "scheduled__2026-11-30T20:47:05.000000+00:00"
    assert ids.check_run_id(scheduled) == scheduled
    assert ids.check_run_id("manual__2026-11-30T20:47:05.123456+00:00", manual=True)
    with pytest.raises(InvalidIdError, match="the beat's"):
        ids.check_run_id(scheduled, manual=True)
    for bad in ("a/b", "x;y", "run id", "a" * 201, "`id`", "\u202e"):
        with pytest.raises(InvalidIdError):
            ids.check_run_id(bad)


def test_a_dag_or_task_with_an_unsafe_id_is_a_definition_error_with_its_location() -> None:
    with pytest.raises(DagDefinitionError, match=r"test_ids\.py:\d+: invalid DAG id 'bad\.id'"):
        DAG("bad.id")

    @task
    def step() -> None:
        pass

    with pytest.raises(DagDefinitionError, match="invalid task id '../x'"), DAG("fine"):
        step.override(task_id="../x")()
