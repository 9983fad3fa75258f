"""The vocabulary every ``airflow...`` alias module offers, and the Airflow names the layer knows
it lacks (each with the feature named in the error)."""

from __future__ import annotations

import enum
import types
from datetime import UTC, datetime, timedelta
from typing import Any

from beatflow.compat.airflow.assets import Asset
from beatflow.compat.airflow.clock import (
    BranchDateTimeOperator,
    BranchDayOfWeekOperator,
    LatestOnlyOperator,
    WeekDay,
)
from beatflow.compat.airflow.dag import DAG, Label, chain, cross_downstream, dag
from beatflow.compat.airflow.decorators import setup, task, teardown
from beatflow.compat.airflow.external import BranchExternalPythonOperator, ExternalPythonOperator
from beatflow.compat.airflow.groups import Param, TaskGroup, task_group
from beatflow.compat.airflow.operators import BaseOperator, XComArg
from beatflow.compat.airflow.running import get_current_context
from beatflow.compat.airflow.sensors import (
    BaseSensorOperator,
    BashSensor,
    DateTimeSensor,
    DayOfWeekSensor,
    ExternalTaskMarker,
    ExternalTaskSensor,
    FileSensor,
    PokeReturnValue,
    PythonSensor,
    TimeDeltaSensor,
    TimeSensor,
)
from beatflow.compat.airflow.standard import (
    AirflowSkipException,
    BaseBranchOperator,
    BashOperator,
    BranchPythonOperator,
    EmptyOperator,
    PythonOperator,
    ShortCircuitOperator,
)
from beatflow.compat.airflow.trigger import TriggerDagRunOperator
from beatflow.compat.airflow.virtualenv import (
    BranchPythonVirtualenvOperator,
    PythonVirtualenvOperator,
)
from beatflow.dag import assets


class TriggerRule(enum.StrEnum):
    """``airflow.utils.trigger_rule.TriggerRule``; a rule beatflow lacks is refused where used."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ALL_DONE_SETUP_SUCCESS = "all_done_setup_success"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    ALL_SKIPPED = "all_skipped"
    ALL_DONE_MIN_ONE_SUCCESS = "all_done_min_one_success"


class AirflowException(Exception):
    """``airflow.exceptions.AirflowException``: fails the try (retried while tries are left)."""


class AirflowFailException(AirflowException):
    """Fails the task; in beatflow it is retried like any error while tries are left."""


def days_ago(n: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    today = datetime.now(UTC).replace(hour=hour, minute=minute, second=second, microsecond=0)
    return today - timedelta(days=n)


def _utc_datetime(*args: int, **kwargs: Any) -> datetime:
    value = datetime(*args, **kwargs)  # type: ignore[arg-type]
    return value if value.tzinfo else value.replace(tzinfo=UTC)


timezone = types.SimpleNamespace(utcnow=lambda: datetime.now(UTC), utc=UTC, datetime=_utc_datetime)

NAMES: dict[str, Any] = {
    "DAG": DAG,
    "dag": dag,
    "task": task,
    "BaseOperator": BaseOperator,
    "EmptyOperator": EmptyOperator,
    "DummyOperator": EmptyOperator,
    "PythonOperator": PythonOperator,
    "BashOperator": BashOperator,
    "XComArg": XComArg,
    "BranchPythonOperator": BranchPythonOperator,
    "ExternalPythonOperator": ExternalPythonOperator,
    "BranchExternalPythonOperator": BranchExternalPythonOperator,
    "PythonVirtualenvOperator": PythonVirtualenvOperator,
    "BranchPythonVirtualenvOperator": BranchPythonVirtualenvOperator,
    "BaseBranchOperator": BaseBranchOperator,
    "ShortCircuitOperator": ShortCircuitOperator,
    "AirflowSkipException": AirflowSkipException,
    "LatestOnlyOperator": LatestOnlyOperator,
    "BranchDayOfWeekOperator": BranchDayOfWeekOperator,
    "BranchDateTimeOperator": BranchDateTimeOperator,
    "WeekDay": WeekDay,
    "chain": chain,
    "cross_downstream": cross_downstream,
    "Label": Label,
    "TriggerRule": TriggerRule,
    "AirflowException": AirflowException,
    "AirflowFailException": AirflowFailException,
    "get_current_context": get_current_context,
    "days_ago": days_ago,
    "timezone": timezone,
    "TaskGroup": TaskGroup,
    "task_group": task_group,
    "Param": Param,
    "BaseSensorOperator": BaseSensorOperator,
    "PokeReturnValue": PokeReturnValue,
    "PythonSensor": PythonSensor,
    "BashSensor": BashSensor,
    "FileSensor": FileSensor,
    "TimeSensor": TimeSensor,
    "TimeSensorAsync": TimeSensor,
    "TimeDeltaSensor": TimeDeltaSensor,
    "TimeDeltaSensorAsync": TimeDeltaSensor,
    "DayOfWeekSensor": DayOfWeekSensor,
    "DateTimeSensor": DateTimeSensor,
    "DateTimeSensorAsync": DateTimeSensor,
    "ExternalTaskSensor": ExternalTaskSensor,
    "ExternalTaskMarker": ExternalTaskMarker,
    "TriggerDagRunOperator": TriggerDagRunOperator,
    "Asset": Asset,
    "Dataset": Asset,
    "AssetAll": lambda *parts: assets.AssetAll(tuple(parts)),
    "AssetAny": lambda *parts: assets.AssetAny(tuple(parts)),
    "setup": setup,
    "teardown": teardown,
    # airflow.sdk.timezone / airflow.utils.timezone
    "datetime": _utc_datetime,
    "utcnow": timezone.utcnow,
    "utc": UTC,
}

UNSUPPORTED_NAMES: dict[str, str] = {
    "AssetAlias": "asset aliases",
    "AssetWatcher": "asset watchers",
    "Metadata": "asset event extras",
    "asset": "@asset (asset-defining functions)",
    "ParamsDict": "ParamsDict (use a dict of Param)",
    "Variable": "Airflow Variables",
    "Connection": "Airflow Connections",
    "BaseHook": "hooks",
    "ObjectStoragePath": "object storage",
    "BaseNotifier": "notifiers (not supported yet)",
    "Context": None,  # type: ignore[dict-item]
}
NAMES["Context"] = dict
del UNSUPPORTED_NAMES["Context"]
