"""Every command given missing, malformed and hostile arguments (bad JSON, path traversal, shell
metacharacters in ids, reserved prefixes, out-of-range numbers): a clear one-line error, a
non-zero exit, no traceback, and nothing enqueued or recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from tests.integration.cli.conftest import cli_env
from tests.procs import run_beatflow

DAGS = Path(__file__).resolve().parents[2] / "dags"
PWNED = Path("/tmp/beatflow-pwned-by-cli-test")

HOSTILE: list[tuple[str, list[str], str]] = [
    ("unknown dag with shell", ["dags", "trigger", "x;rm -rf /"], "x;rm -rf /"),
    ("conf not JSON", ["dags", "trigger", "t_effect", "--conf", "{bad"], "JSON"),
    ("conf not an object", ["dags", "trigger", "t_effect", "--conf", "[1, 2]"], "object"),
    ("conf unknown param", ["dags", "trigger", "t_effect", "--conf", '{"nope": 1}'], "nope"),
    ("run id traversal", ["dags", "trigger", "t_effect", "--run-id", "../../etc/passwd"],
     "invalid run id"),
    ("run id substitution", ["dags", "trigger", "t_effect", "--run-id", f"$(touch {PWNED})"],
     "invalid run id"),
    ("run id reserved", ["dags", "trigger", "t_effect", "--run-id", "scheduled__2026-01-01"],
     "the beat's"),
    ("run id too long", ["dags", "trigger", "t_effect", "--run-id", "r" * 500],
     "1 to 200 characters"),
    ("show traversal", ["dags", "show", "../../etc/passwd"], "passwd"),
    ("pause empty id", ["dags", "pause", ""], "DAG"),
    ("backfill bad dates", ["dags", "backfill", "t_effect", "--start", "not-a-date",
                            "--end", "2026-01-01"], "not-a-date"),
    ("runs show unknown", ["runs", "show", "t_effect", "../x"], "../x"),
    ("runs list negative limit", ["runs", "list", "--limit", "-5"], "-5"),
    ("dlq replay not a number", ["dlq", "replay", "abc"], "abc"),
    ("dlq replay unknown", ["dlq", "replay", "999999"], "999999"),
    ("health unknown process", ["health", "bogus"], "bogus"),
    ("unknown command", ["no-such-command"], "no-such-command"),
]  # fmt: skip


@pytest.fixture
def env(redis_url: str, postgres_url: str) -> dict[str, str]:
    return cli_env(redis_url, postgres_url, DAGS)


@pytest.mark.parametrize(("case", "argv", "says"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_arguments_get_a_clear_error_and_change_nothing(
    env: dict[str, str], case: str, argv: list[str], says: str
) -> None:
    result = run_beatflow(env, *argv)
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case}: exit 0\n{output}"
    assert "Traceback" not in output, f"{case}: a traceback instead of an error\n{output}"
    assert says in output, f"{case}: the error does not say {says!r}\n{output}"
    assert len(result.stderr.strip().splitlines()) <= 4, f"{case}: not a short error\n{output}"
    assert not PWNED.exists()
    engine = sa.create_engine(env["BEATFLOW_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM dag_runs")).scalar_one() == 0
    finally:
        engine.dispose()
    client = redis.Redis.from_url(env["BEATFLOW_BROKER_URL"])
    try:
        queued = [k for k in client.scan_iter() if not k.startswith(b"_kombu")]
        assert queued == [], f"{case}: Redis keys written: {queued[:5]}"
    finally:
        client.close()
