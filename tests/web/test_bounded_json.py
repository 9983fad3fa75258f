"""records_json.loads_bounded, the parser for JSON from outside: it measures nesting exactly
(brackets inside strings do not count), refuses input over its limits before parsing, and
raises nothing but ValueError whatever it is given."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beatflow.errors import BeatflowError, JsonLimitError
from beatflow.records_json import json_depth, loads_bounded

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=30,
)


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


@given(JSON, st.booleans())
def test_the_depth_is_measured_exactly_and_values_round_trip(value: Any, ascii: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii)
    assert json_depth(text) == depth_of(value)
    assert loads_bounded(text, max_depth=depth_of(value), max_bytes=len(text.encode())) == value


@given(JSON)
def test_one_level_or_one_byte_over_the_limit_is_refused(value: Any) -> None:
    text = json.dumps(value)
    if depth_of(value) > 0:
        with pytest.raises(JsonLimitError, match="over the limit of"):
            loads_bounded(text, max_depth=depth_of(value) - 1)
    with pytest.raises(JsonLimitError) as err:
        loads_bounded(text, max_bytes=len(text.encode()) - 1)
    assert err.value.limit == len(text.encode()) - 1


@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_any_input_parses_or_raises_a_value_error(data: str | bytes) -> None:
    with contextlib.suppress(ValueError):
        loads_bounded(data)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"a":' * 20_000 + "1" + "}" * 20_000,
        '"' + '\\"' * 30_000,  # an unterminated string of escapes
        '"\\' * 30_000,
        '"[' * 30_000,
    ],
)
def test_hostile_input_is_refused_and_never_recurses(text: str) -> None:
    # the scan is linear: a quadratic one would hit the suite's per-test timeout on these
    with pytest.raises(ValueError) as err:
        loads_bounded(text, max_bytes=1 << 20)
    assert not isinstance(err.value, RecursionError)


def test_the_limit_error_is_a_beatflow_error_and_a_value_error() -> None:
    with pytest.raises(JsonLimitError) as err:
        loads_bounded("[[[]]]", max_depth=2)
    assert isinstance(err.value, BeatflowError) and isinstance(err.value, ValueError)
    assert str(err.value) == "JSON is nested 3 levels deep, over the limit of 2 levels"
