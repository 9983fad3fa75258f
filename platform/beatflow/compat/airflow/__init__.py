"""Airflow DAG files on beatflow: while the DAG loader runs a module, ``import airflow`` (and
``airflow.sdk``, ``airflow.decorators``, ``airflow.operators.*``, ...) resolves to this layer,
which builds beatflow DAGs from Airflow's vocabulary. Outside the loader nothing is aliased: a
real Airflow installed in the same environment is never shadowed."""

from __future__ import annotations

from beatflow.compat.airflow.finder import UnsupportedAirflowFeature, airflow_imports

__all__ = ["UnsupportedAirflowFeature", "airflow_imports"]
