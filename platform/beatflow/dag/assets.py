"""Assets (data-aware scheduling): ``Asset("warehouse.orders")`` names a piece of data; a task's
``outlets=[...]`` marks it updated when the task run succeeds, and ``DAG(schedule=[a, b])`` runs
a DAG once all of its assets were updated since its last asset-triggered run (``a | b``: any of
them; ``a & b``: all, as a list says). Pure Python: the conditions are evaluated on the set of
asset names that have unconsumed events (``scheduler.assets`` reads them from the store)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# letters, digits and ``_ . - : /`` (URIs such as ``s3://bucket/key`` fit); at most 250
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/\-]{0,249}")


def name_problem(name: Any) -> str | None:
    """What is wrong with an asset name, or None."""
    if not isinstance(name, str):
        return f"an asset name must be a string, got {type(name).__name__}"
    if not NAME_RE.fullmatch(name):
        return (
            f"bad asset name {name[:60]!r}: letters, digits, '_', '.', '-', ':' and '/', "
            "starting with a letter, digit or '_', at most 250 characters"
        )
    return None


class _Condition:
    """An asset condition: ``|`` makes any-of, ``&`` all-of."""

    def __or__(self, other: Condition) -> AssetAny:
        return AssetAny((self, _cond(other)))  # type: ignore[arg-type]

    def __and__(self, other: Condition) -> AssetAll:
        return AssetAll((self, _cond(other)))  # type: ignore[arg-type]

    def names(self) -> set[str]:
        raise NotImplementedError

    def met(self, updated: set[str]) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Asset(_Condition):
    """A named piece of data a task updates (``outlets``) and a DAG may be scheduled on."""

    name: str

    def __post_init__(self) -> None:
        problem = name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)

    def names(self) -> set[str]:
        return {self.name}

    def met(self, updated: set[str]) -> bool:
        return self.name in updated

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class AssetAll(_Condition):
    """Every one of its parts updated (``a & b``, or a list)."""

    parts: tuple[Condition, ...]

    def names(self) -> set[str]:
        return set().union(*(p.names() for p in self.parts))

    def met(self, updated: set[str]) -> bool:
        return all(p.met(updated) for p in self.parts)

    def describe(self) -> str:
        return " & ".join(_grouped(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class AssetAny(_Condition):
    """Any one of its parts updated (``a | b``)."""

    parts: tuple[Condition, ...]

    def names(self) -> set[str]:
        return set().union(*(p.names() for p in self.parts))

    def met(self, updated: set[str]) -> bool:
        return any(p.met(updated) for p in self.parts)

    def describe(self) -> str:
        return " | ".join(_grouped(p) for p in self.parts)


Condition = Asset | AssetAll | AssetAny


def _grouped(part: Condition) -> str:
    return part.describe() if isinstance(part, Asset) else f"({part.describe()})"


def _cond(value: Any) -> Condition:
    if isinstance(value, Asset | AssetAll | AssetAny):
        return value
    if isinstance(value, str):
        return Asset(value)
    raise ValueError(f"expected an Asset or an asset condition, got {type(value).__name__}")


def is_asset_schedule(value: Any) -> bool:
    """Whether a DAG's ``schedule=`` names assets (an Asset, a condition, or a list of them)."""
    if isinstance(value, Asset | AssetAll | AssetAny):
        return True
    return isinstance(value, list | tuple) and not isinstance(value, str)


def asset_condition(value: Any) -> Condition:
    """The condition of an asset ``schedule=``; ValueError says what is wrong (an empty list,
    something not an asset, a bad name)."""
    if isinstance(value, Asset | AssetAll | AssetAny):
        return value
    items = list(value)
    if not items:
        raise ValueError("schedule is an empty list of assets: name at least one Asset")
    return AssetAll(tuple(_cond(v) for v in items))


def outlet_names(value: Any) -> tuple[str, ...]:
    """The asset names of a task's ``outlets=`` (Assets or names); ValueError if bad."""
    if value is None:
        return ()
    if isinstance(value, Asset | str):
        value = [value]
    names: list[str] = []
    for item in value if isinstance(value, Iterable) else [value]:
        if isinstance(item, Asset):
            names.append(item.name)
            continue
        problem = name_problem(item)
        if problem is not None:
            raise ValueError(f"outlets: {problem}")
        names.append(item)
    return tuple(dict.fromkeys(names))


def schedule_text(schedule: Any, on_assets: Condition | None) -> str | None:
    """A DAG's schedule as ``dags list``/``show`` and the API say it: the cron or interval, or
    ``assets: a & b`` for a DAG scheduled on assets; None when manual."""
    if on_assets is not None:
        return f"assets: {on_assets.describe()}"
    return None if schedule is None else str(schedule.describe())
