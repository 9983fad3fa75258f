"""A dags folder with broken modules: the worker still loads and runs every good DAG."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from beatflow.runtime import runtime_of
from tests.cluster import DAGS, cluster
from tests.unit.dag.test_loader import BROKEN

pytestmark = pytest.mark.slow


def test_broken_modules_do_not_stop_the_worker_from_running_the_good_dags(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name in ("chains.py", "failures.py", "_marks.py"):
        shutil.copy(DAGS / name, folder / name)
    for name, (source, _, _) in BROKEN.items():
        (folder / name).write_text(source)
    with cluster(tmp_path, redis_url, postgres_url, dags=folder) as c:
        final, tasks = c.run("t_chain")
        assert final.state == "success" and tasks["join"].result == "LR12"
        bag = runtime_of(c.app).dagbag
        # zz_duplicate_dag.py's "good" has no twin in this folder, so it loads
        assert {Path(e.file).name for e in bag.errors} == set(BROKEN) - {"zz_duplicate_dag.py"}
        assert {"t_chain", "t_rules", "good"} <= set(bag.dags)
        log = c.log()
        assert "syntax.py:1" in log and "cycle.py:8" in log  # reported by file and line
