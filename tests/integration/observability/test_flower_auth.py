"""`celery -A beatflow flower` as users start it (and `celery -A proj flower` on a project's own app
that ran `beatflow.init_app`): basic auth is on from BEATFLOW_FLOWER_* (an
unauthenticated request gets 401), and with no password at all Flower refuses to start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import procs, services
from tests.http_get import http_status

pytestmark = pytest.mark.slow

FLOWER = [sys.executable, "-m", "celery", "-A", "beatflow", "flower", "--address=127.0.0.1"]
INITAPP = Path(__file__).parents[1] / "initapp"  # the project `proj` of the existing-app how-to
APPS = pytest.mark.parametrize("app", ["beatflow", "proj"])


def _flower(app: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", app, "flower", "--address=127.0.0.1"]


def _env(redis_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = procs.beatflow_env(
        {
            "BEATFLOW_BROKER_URL": redis_url,
            "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'bf.db'}",
            "BEATFLOW_DAGS_FOLDER": str(tmp_path),
            **extra,
        }
    )
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(INITAPP)])
    return env


def _wait_up(flower: procs.Proc, base: str) -> None:
    def up() -> bool:
        if flower.popen is not None and flower.popen.poll() is not None:
            raise RuntimeError(f"flower exited:\n{flower.log()}")
        return http_status(base + "/healthcheck") == 200

    procs.wait_for(up, timeout=60, message="flower to answer /healthcheck")


@APPS
def test_flower_answers_401_without_credentials_and_200_with_the_configured_ones(
    app: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    port = services.free_port()
    env = _env(
        redis_url, tmp_path, BEATFLOW_FLOWER_USER="ops", BEATFLOW_FLOWER_PASSWORD="s3cret-pw"
    )
    flower = procs.Proc(
        [*_flower(app), f"--port={port}"], env, tmp_path / "flower.log", name="flower"
    ).start()
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(flower, base)
        for path in ("/", "/workers", "/tasks", "/api/workers"):
            assert http_status(base + path) == 401, path
            assert http_status(base + path, ("ops", "wrong")) == 401, path
        assert http_status(base + "/", ("ops", "s3cret-pw")) == 200
        assert http_status(base + "/api/workers", ("ops", "s3cret-pw")) == 200
    finally:
        flower.stop()
    assert "s3cret-pw" not in flower.log()


@APPS
def test_flower_without_a_password_refuses_to_start_and_says_why(
    app: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    port = services.free_port()
    result = subprocess.run(
        [*_flower(app), f"--port={port}"],
        env=_env(redis_url, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "refuses to start Flower without authentication" in result.stderr
    assert "BEATFLOW_FLOWER_PASSWORD" in result.stderr


def test_flowers_own_basic_auth_flag_still_works_without_beatflow_settings(
    redis_url: str,
    tmp_path: Path,
) -> None:
    port = services.free_port()
    flower = procs.Proc(
        [*FLOWER, f"--port={port}", "--basic_auth=me:mine"],
        _env(redis_url, tmp_path),
        tmp_path / "flower2.log",
        name="flower2",
    ).start()
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(flower, base)
        assert http_status(base + "/") == 401
        assert http_status(base + "/", ("me", "mine")) == 200
    finally:
        flower.stop()
