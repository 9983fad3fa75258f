"""`beatflow chaos --broker rabbitmq`: the run's own RabbitMQ node holds the queues (Redis keeps
the beat's lock, schedules and results) and RabbitMQ's faults join the others: the node
SIGKILLed and started again, a clean restart, publishers blocked by a memory alarm. A short run
with those faults plus a worker and a beat leader killed must keep every invariant."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow.chaos.faults import FAULTS
from beatflow.chaos.faults_rabbitmq import RABBITMQ_FAULTS, faults_for
from beatflow.cli.chaos import chaos
from tests.chaos.report import chaos_report

KINDS = (*RABBITMQ_FAULTS, "kill_worker", "kill_beat_leader")


def test_rabbitmq_faults_belong_to_rabbitmq_runs_only() -> None:
    assert set(faults_for("redis")) == set(FAULTS)
    assert set(faults_for("rabbitmq")) == set(FAULTS) | {
        "kill_rabbitmq",
        "restart_rabbitmq",
        "block_rabbitmq_publishers",
    }
    result = CliRunner().invoke(chaos, ["--faults", "kill_rabbitmq", "--duration", "5"])
    assert result.exit_code == 2
    assert "unknown fault kind(s) kill_rabbitmq on redis" in result.output


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_short_chaos_run_on_rabbitmq_loses_and_doubles_nothing(tmp_path: Path) -> None:
    report = chaos_report(
        tmp_path / "chaos",
        "--broker", "rabbitmq", "--duration", "30", "--seed", "5", "--min-gap", "1.5",
        "--max-gap", "3", "--faults", ",".join(KINDS),
    )  # fmt: skip
    assert report["broker"] == "rabbitmq"
    assert set(report["faults"]) == set(KINDS), report["faults"]
    assert len(report["invariants"]) == 6
