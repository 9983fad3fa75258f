"""The import hook: while a DAG module runs, ``airflow`` and its submodules resolve to this layer's
alias modules (and ``pendulum`` to a small stand-in when pendulum is not installed). On exit the
aliases leave ``sys.modules`` and whatever was there before (a real Airflow) is put back."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

# Module names a DAG file may import; every alias module offers the whole vocabulary (an Airflow
# name is the same object whichever of its 2.x or 3.x homes it is imported from).
SUPPORTED_MODULES = frozenset(
    {
        "airflow",
        "airflow.sdk",
        "airflow.sdk.definitions",
        "airflow.sdk.definitions.dag",
        "airflow.sdk.definitions.edges",
        "airflow.sdk.bases",
        "airflow.sdk.bases.operator",
        "airflow.sdk.bases.notifier",
        "airflow.sdk.exceptions",
        "airflow.providers.common",
        "airflow.providers.common.compat",
        "airflow.providers.common.compat.sdk",
        "airflow.decorators",
        "airflow.exceptions",
        "airflow.models",
        "airflow.models.dag",
        "airflow.models.baseoperator",
        "airflow.models.xcom_arg",
        "airflow.operators",
        "airflow.operators.bash",
        "airflow.operators.python",
        "airflow.operators.empty",
        "airflow.operators.dummy",
        "airflow.providers",
        "airflow.providers.standard",
        "airflow.providers.standard.operators",
        "airflow.providers.standard.operators.bash",
        "airflow.providers.standard.operators.python",
        "airflow.providers.standard.operators.empty",
        "airflow.providers.standard.operators.branch",
        "airflow.operators.branch",
        "airflow.operators.latest_only",
        "airflow.operators.weekday",
        "airflow.operators.datetime",
        "airflow.providers.standard.operators.latest_only",
        "airflow.providers.standard.operators.weekday",
        "airflow.providers.standard.operators.datetime",
        "airflow.providers.standard.utils",
        "airflow.providers.standard.utils.weekday",
        "airflow.utils.weekday",
        "airflow.providers.standard.decorators",
        "airflow.utils",
        "airflow.utils.dates",
        "airflow.utils.edgemodifier",
        "airflow.utils.helpers",
        "airflow.utils.trigger_rule",
        "airflow.utils.timezone",
        "airflow.utils.task_group",
        "airflow.models.param",
        "airflow.sdk.definitions.taskgroup",
        "airflow.sdk.definitions.param",
        "airflow.sdk.definitions.decorators",
        "airflow.sdk.definitions.decorators.task_group",
        "airflow.decorators.task_group",
        "airflow.sdk.bases.sensor",
        "airflow.sdk.api",
        "airflow.sdk.api.datamodels",
        "airflow.sdk.api.datamodels._generated",
        "airflow.sdk.timezone",
        "airflow.sensors",
        "airflow.sensors.base",
        "airflow.sensors.python",
        "airflow.sensors.bash",
        "airflow.sensors.filesystem",
        "airflow.sensors.time_sensor",
        "airflow.sensors.time_delta",
        "airflow.sensors.weekday",
        "airflow.sensors.external_task",
        "airflow.providers.standard.sensors",
        "airflow.providers.standard.sensors.python",
        "airflow.providers.standard.sensors.bash",
        "airflow.providers.standard.sensors.filesystem",
        "airflow.providers.standard.sensors.time",
        "airflow.providers.standard.sensors.date_time",
        "airflow.sensors.date_time",
        "airflow.providers.standard.sensors.time_delta",
        "airflow.providers.standard.sensors.weekday",
        "airflow.providers.standard.sensors.external_task",
        "airflow.providers.standard.operators.trigger_dagrun",
        "airflow.operators.trigger_dagrun",
        "airflow.datasets",
        "airflow.sdk.definitions.asset",
    }
)

# Modules known to need what beatflow's layer lacks: the prefix and the feature, for the error.
UNSUPPORTED_MODULES: Mapping[str, str] = {
    "airflow.providers.standard.triggers": "deferrable triggers",
    "airflow.triggers": "deferrable triggers",
    "airflow.timetables": "custom timetables",
    "airflow.providers.cncf.kubernetes": "Kubernetes",
    "airflow.providers.standard.operators.hitl": "human-in-the-loop operators",
    "airflow.listeners": "listeners",
    "airflow.plugins_manager": "plugins",
    "airflow.io": "object storage",
}


class UnsupportedAirflowFeature(ImportError):
    """A DAG module uses an Airflow module or name that beatflow's layer does not provide."""


def unsupported(name: str, feature: str | None = None) -> UnsupportedAirflowFeature:
    what = f"{name} ({feature})" if feature else name
    return UnsupportedAirflowFeature(f"{what} is not supported by beatflow's Airflow layer")


def _module_feature(name: str) -> str | None:
    for prefix, feature in UNSUPPORTED_MODULES.items():
        if name == prefix or name.startswith(prefix + "."):
            return feature
    return None


class AliasModule(types.ModuleType):
    """An ``airflow...`` module: every name of the layer's vocabulary (a module the layer does not
    know offers none), and a clear error for an Airflow name the layer lacks, naming the module
    the DAG file imported it from."""

    def __init__(self, name: str, known: bool) -> None:
        super().__init__(name)
        self.__known = known

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr.startswith("_AliasModule"):
            raise AttributeError(attr)
        from beatflow.compat.airflow.names import NAMES, UNSUPPORTED_NAMES

        if attr in NAMES and self.__known:
            return NAMES[attr]
        raise unsupported(f"{self.__name__}.{attr}", UNSUPPORTED_NAMES.get(attr))


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, shim_pendulum: bool) -> None:
        self.shim_pendulum = shim_pendulum

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pendulum" and self.shim_pendulum:
            return importlib.util.spec_from_loader(fullname, self)
        if fullname != "airflow" and not fullname.startswith("airflow."):
            return None
        feature = _module_feature(fullname)
        if feature is not None:
            raise unsupported(fullname, feature)
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == "pendulum":
            from beatflow.compat.airflow import pendulum_shim

            return pendulum_shim.module()
        return AliasModule(spec.name, spec.name in SUPPORTED_MODULES)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _ours(name: str) -> bool:
    return name == "airflow" or name.startswith("airflow.")


_lock = threading.RLock()
_depth = 0
_saved: dict[str, types.ModuleType] = {}
_finder: _Finder | None = None


@contextmanager
def airflow_imports() -> Iterator[None]:
    """For the duration of the block, ``import airflow...`` gives this layer's modules. What
    ``sys.modules`` held under those names before (a real Airflow) is set aside and put back."""
    global _depth, _finder
    with _lock:
        if _depth == 0:
            shim = "pendulum" not in sys.modules and importlib.util.find_spec("pendulum") is None
            for name in [n for n in sys.modules if _ours(n)]:
                _saved[name] = sys.modules.pop(name)
            _finder = _Finder(shim)
            sys.meta_path.insert(0, _finder)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                from beatflow.compat.airflow.dag import finalize_opened

                finalize_opened()
                if _finder in sys.meta_path:
                    sys.meta_path.remove(_finder)
                if _finder is not None and _finder.shim_pendulum:
                    sys.modules.pop("pendulum", None)
                _finder = None
                for name in [n for n in sys.modules if _ours(n)]:
                    if name not in _saved:
                        del sys.modules[name]
                sys.modules.update(_saved)
                _saved.clear()
