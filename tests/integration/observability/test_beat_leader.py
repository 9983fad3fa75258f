"""Two real beat replicas under a real exporter: the leader gauge names the replica holding the
scheduler lock; SIGKILL it, and the gauge moves to the other replica while the failover counter
goes up by one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from beatflow.store import Store
from tests import procs, services
from tests.integration.observability.conftest import (
    Samples,
    exporter_proc,
    scrape,
    wait_exporter_ready,
)

pytestmark = pytest.mark.slow


def _leaders(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["instance"]: v
        for (name, labels), v in samples.items()
        if name == "beatflow_beat_leader"
    }


def test_killing_the_beat_leader_moves_the_leader_gauge_and_counts_one_failover(
    redis_url: str,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    Store(postgres_url).upgrade()
    (tmp_path / "dags").mkdir()
    port = services.free_port()
    env = {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": postgres_url,
        "BEATFLOW_DAGS_FOLDER": str(tmp_path / "dags"),
        "BEATFLOW_METRICS_PORT": str(port),
    }
    exporter = exporter_proc(tmp_path, env).start()
    beats = {
        name: procs.Proc(
            [sys.executable, "-m", "celery", "-A", "beatflow", "beat", "-l", "info"],
            procs.beatflow_env({**env, "BEATFLOW_INSTANCE": name}),
            tmp_path / f"beat-{name}.log",
            name=name,
        ).start()
        for name in ("beat-a", "beat-b")
    }
    metrics = f"http://127.0.0.1:{port}/metrics"

    def logs() -> str:
        return (
            "\n".join(f"--- {n}\n{b.log()[-2000:]}" for n, b in beats.items())
            + f"\n--- exporter\n{exporter.log()[-2000:]}"
        )

    def one_leader(among: set[str]) -> str | None:
        gauges = _leaders(scrape(metrics))
        leading = [i for i, v in gauges.items() if v == 1]
        if set(gauges) >= among and len(leading) == 1 and leading[0] in among:
            return leading[0]
        return None

    try:
        wait_exporter_ready(exporter, f"http://127.0.0.1:{port}")
        try:
            first = str(
                procs.wait_for(
                    lambda: one_leader(set(beats)),
                    timeout=60,
                    message="one beat leader among two replicas",
                )
            )
        except TimeoutError:
            pytest.fail(f"no single leader in the gauge\n{logs()}")
        before = scrape(metrics).get_value("beatflow_beat_failovers_total")

        beats[first].kill()
        (other,) = set(beats) - {first}
        try:
            procs.wait_for(
                lambda: one_leader({other}),
                timeout=60,
                message=f"{other} to lead after {first} was killed",
            )
            procs.wait_for(
                lambda: scrape(metrics).get_value("beatflow_beat_failovers_total") >= before + 1,
                timeout=30,
                message="the failover counter to move",
            )
        except TimeoutError as exc:
            pytest.fail(f"{exc}\n{logs()}")
        after = scrape(metrics)
        assert _leaders(after)[first] == 0
        assert _leaders(after)[other] == 1
        assert after.get_value("beatflow_beat_failovers_total") == before + 1
    finally:
        for beat in beats.values():
            beat.stop()
        exporter.stop()
