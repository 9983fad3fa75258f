"""The short chaos run CI makes: `beatflow chaos` with a fixed seed, every fault kind injected at
least once (worker SIGKILL/SIGTERM/SIGSTOP, beat leader SIGKILL/SIGSTOP, Redis restarted with and
without its data, Redis refusing writes, PostgreSQL stopped, the leader's DB connection stalled,
a worker rolled onto a changed DAG module), then every invariant must hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.chaos.faults import FAULTS
from tests.chaos.report import chaos_report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_short_chaos_run_loses_and_doubles_nothing(tmp_path: Path) -> None:
    report = chaos_report(
        tmp_path / "chaos",
        "--duration", "60", "--seed", "7", "--min-gap", "1.5", "--max-gap", "3",
    )  # fmt: skip
    assert set(report["faults"]) == set(FAULTS), report["faults"]
    assert [i["name"] for i in report["invariants"]] == [
        "every tick made exactly one run",
        "every DAG run is final",
        "side effects happened once",
        "dead letters are exactly the failed task runs",
        "max_active_runs held and no slot leaked",
        "metrics agree with the database",
    ]
