"""Params: JSON-Schema-style checks (type, enum, minimum, maximum, pattern) at trigger time, each
problem naming its param; definition mistakes (a default its own schema refuses) at load time."""

from __future__ import annotations

import pytest

from beatflow import DAG, Param, task
from beatflow.errors import ConfError, DagDefinitionError


@task
def noop() -> None:
    return None


def dag_with(**params: object) -> DAG:
    with DAG("p", params=params) as dag:
        noop()
    return dag


def refused(dag: DAG, conf: dict[str, object]) -> ConfError:
    with pytest.raises(ConfError) as info:
        dag.model.resolve_conf(conf)
    return info.value


def test_each_keyword_refuses_what_it_should_and_names_the_param() -> None:
    dag = dag_with(
        region=Param("eu", type="string", enum=["eu", "us"]),
        batch=Param(100, type="integer", minimum=1, maximum=1000),
        day=Param("2026-01-01", type=str, pattern=r"^\d{4}-\d{2}-\d{2}$"),
        ratio=Param(0.5, type="number", minimum=0, maximum=1),
    )
    assert dag.model.resolve_conf(None) == {
        "region": "eu",
        "batch": 100,
        "day": "2026-01-01",
        "ratio": 0.5,
    }
    err = refused(dag, {"region": "asia", "batch": 5000, "day": "yesterday", "ratio": True})
    assert err.fields == {
        "region": "must be one of 'eu', 'us', got 'asia'",
        "batch": "must be at most 1000, got 5000",
        "day": r"must match the pattern ^\d{4}-\d{2}-\d{2}$, got 'yesterday'",
        "ratio": "must be number, got bool True",
    }
    assert any(p.startswith('"batch" must be at most 1000') for p in err.problems)
    assert refused(dag, {"batch": 0}).fields == {"batch": "must be at least 1, got 0"}
    assert dag.model.resolve_conf({"batch": 7, "ratio": 1})["ratio"] == 1


def test_python_types_required_and_inferred_defaults_keep_working() -> None:
    dag = dag_with(name=Param(type=str, required=True), limit=100, anything=None)
    assert refused(dag, {}).fields == {"name": "is required (str)"}
    assert dag.model.resolve_conf({"name": "x"}) == {"name": "x", "limit": 100, "anything": None}
    assert refused(dag, {"name": "x", "limit": "9"}).fields == {"limit": "must be int, got str '9'"}
    unknown = refused(dag, {"name": "x", "limt": 1})
    assert 'unknown key "limt" (did you mean "limit"?)' in unknown.problems[0]


def test_an_open_conf_passes_keys_that_are_not_params_and_still_checks_params() -> None:
    dag = dag_with(limit=Param(10, type="integer"))
    assert "unknown key" in refused(dag, {"message": "hi"}).problems[0]
    dag.model.open_conf = True  # an Airflow DAG file's: dag_run.conf is free-form
    assert dag.model.resolve_conf({"message": "hi"}) == {"message": "hi", "limit": 10}
    assert refused(dag, {"message": "hi", "limit": "x"}).fields == {
        "limit": "must be integer, got str 'x'"
    }


def test_json_integers_and_enum_of_mixed_types() -> None:
    dag = dag_with(n=Param(1, type=["integer", "null"]), flag=Param(1, enum=[1, 2]))
    assert dag.model.resolve_conf({"n": None, "flag": 2}) == {"n": None, "flag": 2}
    assert refused(dag, {"n": 1.5}).fields == {"n": "must be integer or null, got float 1.5"}
    assert refused(dag, {"flag": True}).fields == {"flag": "must be one of 1, 2, got True"}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Param(5, type="integer", maximum=3), "its default 5 is refused"),
        (lambda: Param("x", enum=["a", "b"]), "its default 'x' is refused"),
        (lambda: Param(1, type="int"), "unknown type 'int'"),
        (lambda: Param(1, minimum=5, maximum=2), "minimum 5 is above maximum 2"),
        (lambda: Param("a", pattern="("), "is not a regular expression"),
        (lambda: Param("a", enum="ab"), "enum must be a non-empty list"),
    ],
)
def test_definition_mistakes_are_reported_where_the_param_is_written(
    make: object, message: str
) -> None:
    with pytest.raises(DagDefinitionError, match=message) as info:
        make()  # type: ignore[operator]
    assert info.value.file == __file__


def test_the_schema_is_json_schema() -> None:
    p = Param(3, type=int, minimum=1, enum=[1, 3], title="Count", description="how many")
    assert p.schema() == {
        "type": "integer",
        "enum": [1, 3],
        "minimum": 1,
        "title": "Count",
        "description": "how many",
    }


def test_format_and_further_keywords_are_checked_by_jsonschema() -> None:
    dag = dag_with(
        day=Param("2026-01-01", type="string", format="date"),
        at=Param("2026-01-01T12:00:00+00:00", type="string", format="date-time"),
        every=Param("PT15M", type="string", format="duration"),
        name=Param("Ada Lovelace", type="string", keywords={"minLength": 10}),
        sizes=Param([1, 2], type="array", keywords={"items": {"type": "number"}}),
        note=Param("a\nb", type="string", format="multiline"),  # a form's hint: no check
    )
    assert dag.model.resolve_conf({"note": "anything"})["day"] == "2026-01-01"
    err = refused(
        dag,
        {
            "day": "2026-02-30",
            "at": "yesterday",
            "every": "15 minutes",
            "name": "Ada",
            "sizes": [1, "two"],
        },
    )
    assert err.fields == {
        "day": "must be in the date format, got '2026-02-30'",
        "at": "must be in the date-time format, got 'yesterday'",
        "every": "must be in the duration format, got '15 minutes'",
        "name": "must fit the JSON Schema keyword minLength=10: 'Ada' is too short",
        "sizes": "must fit the JSON Schema keyword type='number' at $[1]: 'two' is not of"
        " type 'number'",
    }
    assert Param("a@example.org", format="email").schema() == {"format": "email"}
    assert "email format" in str(Param(format="email").problem("someone"))
    assert Param([], keywords={"minItems": 0}).schema() == {"minItems": 0}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Param("soon", format="date"), "its default 'soon' is refused"),
        (lambda: Param("x", keywords={"minLength": "ten"}), "are not a JSON Schema"),
        (lambda: Param("x", keywords={"type": "string"}), "use Param\\(type=...\\)"),
    ],
)
def test_format_and_keyword_mistakes_are_reported_at_definition(make: object, message: str) -> None:
    with pytest.raises(DagDefinitionError, match=message):
        make()  # type: ignore[operator]
