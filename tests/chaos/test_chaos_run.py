"""The short chaos run CI makes: `beatflow chaos` with a fixed seed, every fault kind injected at
least once (worker SIGKILL/SIGTERM/SIGSTOP, beat leader SIGKILL/SIGSTOP, Redis restarted with and
without its data, Redis refusing writes, PostgreSQL stopped, the leader's DB connection stalled,
a worker rolled onto a changed DAG module), then every invariant must hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beatflow.chaos.faults import FAULTS

BEATFLOW = str(Path(sys.executable).with_name("beatflow"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_short_chaos_run_loses_and_doubles_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    result = subprocess.run(
        [BEATFLOW, "chaos", "--duration", "60", "--seed", "7", "--min-gap", "1.5",
         "--max-gap", "3", "--json", "--workdir", str(tmp_path / "chaos")],
        env=env, capture_output=True, text=True, timeout=560, check=False,
    )  # fmt: skip
    assert result.stdout.strip(), result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    failed = [i for i in report["invariants"] if not i["ok"]]
    assert result.returncode == 0 and report["ok"], json.dumps(failed, indent=2)
    assert set(report["faults"]) == set(FAULTS), report["faults"]
    assert [i["name"] for i in report["invariants"]] == [
        "every tick made exactly one run",
        "every DAG run is final",
        "side effects happened once",
        "dead letters are exactly the failed task runs",
        "max_active_runs held and no slot leaked",
        "metrics agree with the database",
    ]
    assert report["load"]["dag_runs"] > 0 and report["load"]["task_runs"] > 0
