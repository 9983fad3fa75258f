"""What the CLI tests share: the environment of a `beatflow` child process."""

from __future__ import annotations

import os
from pathlib import Path

from beatflow.store import Store
from tests.procs import ROOT


def cli_env(redis_url: str, postgres_url: str, dags: Path) -> dict[str, str]:
    """This process's environment without its BEATFLOW_* settings, then the test's Redis, its
    PostgreSQL database (migrated here), ``dags`` and the source tree on PYTHONPATH."""
    Store(postgres_url).upgrade()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env.update(
        {
            "BEATFLOW_BROKER_URL": redis_url,
            "BEATFLOW_DATABASE_URL": postgres_url,
            "BEATFLOW_DAGS_FOLDER": str(dags),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
        }
    )
    return env
