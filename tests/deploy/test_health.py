"""`beatflow health`: the probes containers and Kubernetes run. They talk to a real Redis and
real `celery worker` / `celery beat` processes, and answer with one line and exit 0 or 1."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from beatflow import keys
from beatflow.cli.health import Unhealthy, detect_process
from tests.deploy.manifests import ROOT

BIN = Path(sys.executable).parent


def _env(broker: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    return {**keep, "BEATFLOW_BROKER_URL": broker, "BEATFLOW_LOG_FORMAT": "text"}


def health(broker: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "beatflow"), "health", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(broker),
        cwd=ROOT,
        check=False,
    )


def wait_healthy(
    broker: str, *args: str, deadline: float = 45.0
) -> subprocess.CompletedProcess[str]:
    end = time.monotonic() + deadline
    while True:
        proc = health(broker, *args)
        if proc.returncode == 0 or time.monotonic() > end:
            return proc


@pytest.fixture
def celery_process(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Start a real worker (and beat, via indirect param) on the test Redis; stop it after."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> None:
        procs.append(
            subprocess.Popen(
                [str(BIN / "celery"), "-A", "tests.deploy.health_app", *argv],
                env=_env(redis_url),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    node = f"celery@probe-{uuid.uuid4().hex[:8]}"
    start(
        "worker",
        "-n",
        node,
        "--pool",
        "solo",
        "-Q",
        f"health-{node[-8:]}",
        "-l",
        "warning",
        "--",
        "worker.soft_shutdown_timeout=5",
        "worker.enable_soft_shutdown_on_idle=true",
    )
    start("beat", "-l", "warning", "--schedule", str(tmp_path / "celerybeat-schedule"))
    yield redis_url, node
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_worker_probe_answers_for_its_own_node_and_not_for_another(
    celery_process: tuple[str, str],
) -> None:
    broker, node = celery_process
    proc = wait_healthy(broker, "worker", "--node", node, "--timeout", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"healthy: worker {node} answered ping"
    other = health(broker, "worker", "--node", "celery@nobody-here", "--timeout", "1")
    assert other.returncode == 1
    assert (
        other.stdout.strip()
        == "unhealthy: worker celery@nobody-here did not answer a ping within 1s"
    )


@pytest.mark.slow
def test_beat_probe_is_unhealthy_when_only_a_plain_celery_beat_runs_here(
    celery_process: tuple[str, str],
) -> None:
    # the fixture runs a plain `celery beat` (not beatflow's): it must not make the probe pass
    broker, _ = celery_process
    proc = health(broker, "beat", "--timeout", "2")
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.startswith("unhealthy: no beatflow beat heartbeat in Redis from"), (
        proc.stdout
    )


def test_beat_probe_is_unhealthy_when_no_beat_runs(redis_url: str) -> None:
    proc = health(redis_url, "beat", "--timeout", "2")
    assert proc.returncode == 1
    assert proc.stdout.startswith("unhealthy: no beatflow beat heartbeat in Redis from")


def test_beat_probe_is_unhealthy_when_no_beat_runs_here_while_other_beats_heartbeat(
    redis_url: str,
) -> None:
    # healthy heartbeats of beats that are not this container's: one on another host, one on
    # this host under a pid that is no `celery beat` (this test's own): neither may count
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    now = time.time()
    others = {
        "elsewhere": {"host": "another-host", "pid": os.getpid()},
        "same-host": {"host": socket.gethostname(), "pid": os.getpid()},
    }
    try:
        for instance, where in others.items():
            record = {"instance": instance, "role": "leader", "epoch": 1, "seen": now, **where}
            client.set(
                keys.replica_key(instance),
                json.dumps({**record, "loop_seen": now, "stall_timeout": 600.0}),
                px=60_000,
            )
        proc = health(redis_url, "beat", "--timeout", "2")
        assert proc.returncode == 1, proc.stdout
        assert proc.stdout.startswith("unhealthy: no beatflow beat heartbeat in Redis from"), (
            proc.stdout
        )
    finally:
        client.delete(*(keys.replica_key(i) for i in others))
        client.close()


@pytest.mark.slow
def test_beat_probe_follows_this_containers_beatflow_beat_and_fails_when_it_stops(
    redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "dags").mkdir()
    env = {
        **_env(redis_url),
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'results.db'}",
        "BEATFLOW_DAGS_FOLDER": str(tmp_path / "dags"),
    }
    subprocess.run([str(BIN / "beatflow"), "db", "upgrade"], env=env, cwd=ROOT, check=True)
    beat = subprocess.Popen(
        [str(BIN / "celery"), "-A", "beatflow", "beat", "-l", "warning"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc = wait_healthy(redis_url, "beat", "--timeout", "2")
        assert proc.returncode == 0, proc.stdout
        assert proc.stdout.startswith(f"healthy: beat {socket.gethostname()}:{beat.pid} is ")
        # a frozen beat (SIGSTOP: its loop and its election thread stop) stops heartbeating
        beat.send_signal(signal.SIGSTOP)
        end = time.monotonic() + 60
        while (proc := health(redis_url, "beat", "--timeout", "2")).returncode == 0:
            assert time.monotonic() < end, "the probe still passes for a frozen beat"
        assert proc.stdout.startswith("unhealthy: no beatflow beat heartbeat"), proc.stdout
        beat.send_signal(signal.SIGCONT)
        assert wait_healthy(redis_url, "beat", "--timeout", "2").returncode == 0
    finally:
        beat.send_signal(signal.SIGCONT)
        beat.send_signal(signal.SIGTERM)
        try:
            beat.wait(timeout=30)
        except subprocess.TimeoutExpired:
            beat.kill()
            beat.wait()


def test_beat_probe_is_unhealthy_when_the_beats_loop_stalls(redis_url: str) -> None:
    # the election thread of a stuck beat keeps heartbeating; the loop's last pass is what counts
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    instance = f"stalled-{uuid.uuid4().hex[:6]}"
    record = {"instance": instance, "role": "leader", "epoch": 3, "seen": time.time()}
    try:
        client.set(
            keys.replica_key(instance),
            json.dumps({**record, "loop_seen": time.time() - 1000, "stall_timeout": 30.0}),
            px=60_000,
        )
        env = {"BEATFLOW_INSTANCE": instance}
        proc = subprocess.run(
            [str(BIN / "beatflow"), "health", "beat", "--timeout", "2"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**_env(redis_url), **env},
            cwd=ROOT,
            check=False,
        )
        assert proc.returncode == 1, proc.stdout
        assert re.search(
            r"tick loop has not completed a pass for 1\d\d\ds \(limit 30.0s\)", proc.stdout
        )
    finally:
        client.delete(keys.replica_key(instance))
        client.close()


def test_an_unreachable_redis_fails_every_redis_probe_fast() -> None:
    dead = "redis://:secret@127.0.0.1:1/0"
    for process in ("worker", "beat", "exporter"):
        proc = health(dead, process, "--timeout", "1")  # subprocess timeout: 60 s
        assert proc.returncode == 1
        assert proc.stdout.startswith("unhealthy: Redis at redis://:****@127.0.0.1:1/0 unreachable")
        assert "secret" not in proc.stdout


def test_exporter_and_flower_probes_fail_when_nothing_listens(redis_url: str) -> None:
    ports = {"BEATFLOW_FLOWER_PORT": "1", "BEATFLOW_METRICS_PORT": "1"}
    for process, url in (
        ("flower", "http://127.0.0.1:1/healthcheck"),
        ("exporter", "http://127.0.0.1:1/healthz"),
    ):
        proc = subprocess.run(
            [str(BIN / "beatflow"), "health", process, "--timeout", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
            env={**_env(redis_url), **ports},
        )
        assert proc.returncode == 1
        assert proc.stdout.startswith(f"unhealthy: {process} at {url} did not answer")


def test_auto_tells_the_process_from_the_container_command_line() -> None:
    assert (
        detect_process(
            iter([["/opt/beatflow/bin/celery", "-A", "beatflow", "worker", "-l", "info"]])
        )
        == "worker"
    )
    assert (
        detect_process(
            iter(
                [
                    ["tini", "--"],
                    [
                        "/opt/beatflow/bin/python",
                        "/opt/beatflow/bin/celery",
                        "-A",
                        "beatflow",
                        "beat",
                    ],
                ]
            )
        )
        == "beat"
    )
    assert detect_process(iter([["/opt/beatflow/bin/beatflow", "exporter"]])) == "exporter"
    assert detect_process(iter([["celery", "-A", "beatflow", "flower", "--port=5555"]])) == "flower"
    with pytest.raises(Unhealthy, match="name it"):
        detect_process(iter([["sh", "-c", "sleep 1"]]))


@pytest.mark.slow
def test_exporter_probe_answers_once_the_real_exporter_serves(
    redis_url: str, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {
        **_env(redis_url),
        "BEATFLOW_METRICS_PORT": port,
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'results.db'}",
    }
    exporter = subprocess.Popen(
        [str(BIN / "beatflow"), "exporter"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 45
        while True:
            proc = subprocess.run(
                [str(BIN / "beatflow"), "health", "exporter", "--timeout", "2"],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
                env=env,
                check=False,
            )
            if proc.returncode == 0 or time.monotonic() > end:
                break
        assert proc.stdout.strip() == (
            f"healthy: exporter answered HTTP 200 at http://127.0.0.1:{port}/healthz"
        )
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
