"""Compatibility layers: DAG files written for other platforms, loaded unchanged by beatflow's
DAG loader (``beatflow.compat.airflow``: Airflow 2.x and 3.x DAG files)."""
