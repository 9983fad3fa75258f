"""Airflow's assets (and 2.x datasets) on beatflow's native ones (``beatflow.dag.assets``):
``Asset("s3://bucket/key")`` is the native asset of that name (Airflow's ``name``, which is the
URI when only one is given), ``a & b`` / ``a | b`` and a list in ``schedule=`` are native asset
conditions, and an operator's ``outlets=[...]`` marks them updated when it succeeds. An asset's
``extra``, ``group`` and the events' extras are not kept; aliases and watchers are refused."""

from __future__ import annotations

from typing import Any

from beatflow.compat.airflow.finder import unsupported
from beatflow.dag import assets


def Asset(
    name: str | None = None,
    uri: str | None = None,
    *,
    group: str = "asset",
    extra: dict[str, Any] | None = None,
    watchers: Any = None,
) -> assets.Asset:
    """``airflow.sdk.Asset(name, uri, group=, extra=)`` (``Dataset(uri)`` in Airflow 2)."""
    if watchers:
        raise unsupported("Asset(watchers=...)", "asset watchers")
    chosen = name or uri
    if not chosen:
        raise ValueError("an Asset needs a name or a uri")
    try:
        return assets.Asset(chosen)
    except ValueError as exc:
        raise unsupported(f"Asset({chosen[:60]!r})", str(exc)) from None


def outlets_of(value: Any) -> tuple[str, ...]:
    """An operator's ``outlets=``: the native asset names (an alias is refused)."""
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, assets.Asset | str):
            raise unsupported(f"outlets of {type(item).__name__}", "asset aliases")
    return assets.outlet_names(list(items))
