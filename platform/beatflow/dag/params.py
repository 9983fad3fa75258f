"""DAG params: ``Param(default, type=..., enum=..., minimum=..., maximum=..., pattern=...,
format=..., keywords={...}, description=..., title=...)``, a JSON Schema, and the check of a
trigger's conf against them (``format`` and further keywords by the jsonschema library). Every
trigger (CLI, API, web form, a schedule's tick, a backfill) goes through :func:`resolve`; each
problem names the param and says why (a ConfError with ``fields``)."""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from beatflow.errors import ConfError, DagDefinitionError

# JSON Schema's type names and the Python values a JSON document decodes to
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
# The formats JSON Schema (2020-12) defines: each is checked here (the format libraries
# pyproject.toml lists), but "iri" and "iri-reference", whose library (rfc3987-syntax) costs over
# a second to import: a Param with them is refused unless it is installed. Any other format
# ("multiline") is a hint to a form, checked by nothing.
SPEC_FORMATS = frozenset({
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
    "json-pointer", "relative-json-pointer", "regex"})  # fmt: skip
# keywords that have a field of their own
_FIELDS = {"type", "enum", "minimum", "maximum", "pattern", "format", "title", "description"}
_PY_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array",
             tuple: "array", dict: "object", type(None): "null"}  # fmt: skip


@functools.cache
def _schema_lib() -> tuple[Any, Any]:
    """jsonschema and every draft's format checks (as Airflow's Param checks them: a "time" is
    HH:MM:SS), imported when a Param first has a format or keywords: most DAGs have neither, and
    every process that loads DAGs (a worker, a beat, each CLI call) would pay for the import."""
    import jsonschema

    return jsonschema, jsonschema.FormatChecker()


def _caller() -> tuple[str | None, int | None]:
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("beatflow."):
        frame = frame.f_back  # type: ignore[assignment]
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)


@dataclass(frozen=True, slots=True)
class Param:
    """A declared DAG parameter: what a trigger's conf value must be, and its default.

    ``type`` is a Python type (``int``), a JSON Schema type name (``"integer"``) or a tuple/list
    of either. A param is required only with ``required=True``; otherwise a missing value takes
    the default (a default of None means "absent" and is passed as None unchecked).
    ``format`` (``"date"``, ``"date-time"``, ``"email"``...) and ``keywords``, more JSON Schema
    keywords (``{"minLength": 10}``, ``{"items": {"type": "number"}}``), are checked by jsonschema.
    """

    default: Any = None
    type: Any = None
    required: bool = False
    description: str = ""
    title: str = ""
    enum: Sequence[Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    format: str | None = None
    keywords: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        problems = self.definition_problems()
        if problems:
            file, line = _caller()
            raise DagDefinitionError("Param: " + "; ".join(problems), file=file, line=line)
        if self.enum is not None:
            object.__setattr__(self, "enum", tuple(self.enum))
        if self.keywords is not None:
            object.__setattr__(self, "keywords", dict(self.keywords))

    # ------------------------------------------------------------------ the schema

    def types(self) -> tuple[Any, ...]:
        if self.type is None:
            return ()
        return tuple(self.type) if isinstance(self.type, tuple | list) else (self.type,)

    def json_types(self) -> tuple[str, ...]:
        """The type as JSON Schema names: ``("integer",)``; () for any."""
        out = []
        for t in self.types():
            name = t if isinstance(t, str) else _PY_NAMES.get(t, "object")
            if name not in out:
                out.append(name)
        return tuple(out)

    def type_name(self) -> str:
        names = [t if isinstance(t, str) else t.__name__ for t in self.types()]
        return " or ".join(names) or "any"

    def schema(self) -> dict[str, Any]:
        """The param as a JSON Schema object (what the API shows, what the form is built from)."""
        out: dict[str, Any] = {}
        types = self.json_types()
        if types:
            out["type"] = types[0] if len(types) == 1 else list(types)
        for key in ("enum", "minimum", "maximum", "pattern", "format"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if key == "enum" else value
        out.update(self.keywords or {})
        if self.title:
            out["title"] = self.title
        if self.description:
            out["description"] = self.description
        return out

    def definition_problems(self) -> list[str]:
        problems = []
        for t in self.types():
            if isinstance(t, str) and t not in JSON_TYPES:
                problems.append(f"unknown type {t!r}; known: {', '.join(JSON_TYPES)}")
            elif not isinstance(t, str | type):
                problems.append(f"type must be a type or a JSON Schema type name, got {t!r}")
        if self.enum is not None and (isinstance(self.enum, str) or not self.enum):
            problems.append("enum must be a non-empty list of values")
        for key in ("minimum", "maximum"):
            value = getattr(self, key)
            if value is not None and not _is_number(value):
                problems.append(f"{key} must be a number, got {value!r}")
        if (
            _is_number(self.minimum) and _is_number(self.maximum) and self.minimum > self.maximum  # type: ignore[operator]
        ):
            problems.append(f"minimum {self.minimum} is above maximum {self.maximum}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except (re.error, TypeError) as exc:
                problems.append(f"pattern {self.pattern!r} is not a regular expression: {exc}")
        problems += self._schema_problems()
        if not problems and self.default is not None:
            problem = self.problem(self.default)
            if problem:
                problems.append(f"its default {_shown(self.default)} is refused: it {problem}")
        return problems

    # ------------------------------------------------------------------ checking a value

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit, as "must be ..., got ..."; None when it fits."""
        types = self.types()
        if types and not any(_is_type(value, t) for t in types):
            return f"must be {self.type_name()}, got {_type_of(value)} {_shown(value)}"
        if self.enum is not None and not any(_same(value, e) for e in self.enum):
            choices = ", ".join(_shown(e) for e in self.enum)
            return f"must be one of {choices}, got {_shown(value)}"
        if _is_number(value):
            if self.minimum is not None and value < self.minimum:
                return f"must be at least {self.minimum}, got {_shown(value)}"
            if self.maximum is not None and value > self.maximum:
                return f"must be at most {self.maximum}, got {_shown(value)}"
        if (
            isinstance(value, str)
            and self.pattern is not None
            and re.search(self.pattern, value) is None
        ):
            return f"must match the pattern {self.pattern}, got {_shown(value)}"
        if self.format is not None or self.keywords:
            return self._jsonschema_problem(value)
        return None

    def _checked_schema(self) -> dict[str, Any]:
        """What jsonschema checks: ``format`` and the further keywords (the rest is checked above,
        with messages of our own)."""
        out = dict(self.keywords or {})
        if self.format is not None:
            out["format"] = self.format
        return out

    def _schema_problems(self) -> list[str]:
        jsonschema, formats = _schema_lib()
        problems = []
        if self.format is not None:
            if not isinstance(self.format, str):
                problems.append(f"format must be a string, got {self.format!r}")
            elif self.format in SPEC_FORMATS and self.format not in formats.checkers:
                problems.append(
                    f"format {self.format!r} cannot be checked here: install jsonschema's"
                    " format-nongpl extra (pip install 'jsonschema[format-nongpl]'; beatflow"
                    " leaves out its rfc3987-syntax, which takes over a second to import)"
                )
        if self.keywords is None:
            return problems
        if not isinstance(self.keywords, Mapping):
            return [*problems, f"keywords must be a mapping, got {self.keywords!r}"]
        for key in sorted(_FIELDS & set(self.keywords)):
            problems.append(f"keywords has {key!r}: use Param({key}=...)")
        try:
            jsonschema.Draft202012Validator.check_schema(self._checked_schema())
        except jsonschema.SchemaError as exc:
            problems.append(f"keywords are not a JSON Schema: {exc.message}")
        return problems

    def _jsonschema_problem(self, value: Any) -> str | None:
        jsonschema, formats = _schema_lib()
        validator = jsonschema.Draft202012Validator(self._checked_schema(), format_checker=formats)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        where = "" if error.json_path == "$" else f" at {error.json_path}"
        if error.validator == "format":
            got = _shown(error.instance)
            return f"must be in the {error.validator_value} format{where}, got {got}"
        keyword = f"{error.validator}={_shown(error.validator_value)}"
        return f"must fit the JSON Schema keyword {keyword}{where}: {error.message}"


def param_from(value: Any) -> Param:
    """A Param from a params={} entry: a Param as is, else a default whose type is inferred."""
    if isinstance(value, Param):
        return value
    if value is None:
        return Param(default=None)
    return Param(default=value, type=type(value))


def resolve(
    dag_id: str,
    params: Mapping[str, Param],
    conf: Mapping[str, Any] | None,
    *,
    open_conf: bool = False,
) -> dict[str, Any]:
    """Check a trigger's conf against ``params``; return the conf with defaults filled.

    Raises ConfError listing every problem (unknown key, wrong type, out of range, missing
    value), with ``fields`` mapping each refused param to its reason. ``open_conf``: keys
    that are not params pass as they are (an Airflow DAG's ``dag_run.conf`` is free-form).
    """
    if conf is not None and not isinstance(conf, Mapping):
        raise ConfError(dag_id, [f"conf must be a JSON object, got {type(conf).__name__}"])
    given = dict(conf or {})
    problems: list[str] = []
    fields: dict[str, str] = {}
    out: dict[str, Any] = {}
    if open_conf:
        out = {k: v for k, v in given.items() if k not in params}
        given = {k: v for k, v in given.items() if k in params}
    for key in sorted(set(given) - set(params)):
        close = difflib.get_close_matches(key, list(params), n=1)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        known = ", ".join(sorted(params)) or "none"
        name = key if len(key) <= 60 else f"{key[:60]}..."
        problems.append(f'unknown key "{name}"{hint}; declared params: {known}')
    for name, param in params.items():
        if name in given:
            value = given[name]
            why = param.problem(value)
            if why:
                fields[name] = why
                problems.append(f'"{name}" {why}')
            out[name] = value
        elif param.required:
            fields[name] = f"is required ({param.type_name()})"
            problems.append(f'"{name}" {fields[name]}')
        else:
            out[name] = param.default
    if problems:
        raise ConfError(dag_id, problems, fields=fields)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: Any, expected: Any) -> bool:
    if isinstance(expected, str):
        if expected in ("integer", "number") and isinstance(value, bool):
            return False  # JSON true is not a number
        if expected == "integer" and isinstance(value, float):
            return value.is_integer()  # JSON Schema: 1.0 is an integer
        return isinstance(value, JSON_TYPES[expected])
    if isinstance(value, bool) and expected is not bool:
        return expected is object
    if expected is float and isinstance(value, int):
        return True
    return isinstance(value, expected)


def _same(value: Any, choice: Any) -> bool:
    return value == choice and isinstance(value, bool) == isinstance(choice, bool)


def _type_of(value: Any) -> str:
    return type(value).__name__


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error message shows it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
