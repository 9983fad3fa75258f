"""The trigger form a DAG's params make: one field per param (a checkbox for a boolean, a select
for an enum, a number input with bounds, a text input with a pattern, a JSON textarea for lists
and objects), its description as help and its default filled in; and the way back, from the
posted fields (``param.<name>``) to a conf. The browser checks what HTML can (required, min, max,
pattern); the server checks everything again (dag/params.py) and puts each error by its field."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from beatflow.dag.model import DAG
from beatflow.dag.params import Param

PREFIX = "param."


def kind(param: Param) -> str:
    types = [t for t in param.json_types() if t != "null"]
    if param.enum is not None:
        return "select"
    if types == ["boolean"]:
        return "checkbox"
    if types in (["integer"], ["number"], ["integer", "number"], ["number", "integer"]):
        return "number"
    if types == ["string"]:
        return "text"
    if not types and (param.default is None or isinstance(param.default, str)):
        return "text"
    return "json"


def _as_text(param: Param, value: Any) -> str:
    """A value as its field shows it."""
    if value is None:
        return ""
    if kind(param) in ("select", "json") or not isinstance(value, str | int | float):
        return json.dumps(value)
    return str(value)


def fields(
    dag: DAG, raw: Mapping[str, str] | None = None, errors: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The form's fields, with ``raw`` (the posted text, kept on an error) or the defaults."""
    out = []
    for name, param in dag.params.items():
        k = kind(param)
        value = raw.get(name, "") if raw is not None else _as_text(param, param.default)
        field: dict[str, Any] = {
            "name": name,
            "input": PREFIX + name,
            "label": param.title or name,
            "kind": k,
            "help": param.description,
            "required": param.required,
            "value": value,
            "error": (errors or {}).get(name),
            "type": param.type_name(),
        }
        if k == "checkbox":
            field["checked"] = value == "true" if raw is not None else param.default is True
        if k == "select":
            field["options"] = [
                {"value": json.dumps(choice), "label": str(choice)} for choice in param.enum or ()
            ]
            if not param.required and param.default is None:
                field["options"].insert(0, {"value": "", "label": "(none)"})
        if k == "number":
            field["step"] = "1" if param.json_types()[:1] == ("integer",) else "any"
            field["min"], field["max"] = param.minimum, param.maximum
        if k == "text":
            field["pattern"] = param.pattern
        out.append(field)
    return out


def raw_values(dag: DAG, form: Mapping[str, str]) -> dict[str, str]:
    """The posted text of each param's field (an unchecked checkbox posts nothing: "false")."""
    raw = {}
    for name, param in dag.params.items():
        posted = form.get(PREFIX + name)
        if kind(param) == "checkbox":
            raw[name] = "true" if posted in ("true", "on") else "false"
        else:
            raw[name] = posted if isinstance(posted, str) else ""
    return raw


def conf_from(dag: DAG, raw: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The conf the fields say, and the fields whose text is not a value of their kind. An
    empty field of a param that is not required is left out (its default applies)."""
    conf: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, param in dag.params.items():
        text = raw.get(name, "")
        k = kind(param)
        if k == "checkbox":
            conf[name] = text == "true"
            continue
        if text.strip() == "":
            if param.required:
                errors[name] = f"is required ({param.type_name()})"
            continue
        try:
            conf[name] = _parse(param, k, text)
        except ValueError as exc:
            errors[name] = str(exc)
    return conf, errors


def _parse(param: Param, k: str, text: str) -> Any:
    if k == "text":
        return text
    if k == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"must be a number, got {text[:60]!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {text[:60]!r}")
        return int(number) if number.is_integer() and "integer" in param.json_types() else number
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not JSON ({exc.msg}), got {text[:60]!r}") from None
