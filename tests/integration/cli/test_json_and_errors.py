"""The CLI's contract for scripts: every command that prints data takes the one `--json` option and
then prints one JSON document on stdout and nothing else; every error is `error: <what happened>;
<what to do>` on stderr, without a traceback, with an exit code of the documented table."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from beatflow.cli import COMMANDS, LazyGroup, main
from beatflow.cli.common import EXIT_CODES, EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from tests import services
from tests.integration.cli.conftest import cli_env
from tests.procs import run_beatflow

ROOT = Path(__file__).resolve().parents[3]

# Commands that print no data: they serve, supervise or ask (the rest must take --json).
NO_DATA = {"dev", "web", "exporter"}


def _leaves(
    group: click.Group, ctx: click.Context, prefix: str
) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            yield from _leaves(command, click.Context(command, parent=ctx), path)
        else:
            yield path, command


LEAVES = dict(_leaves(main, click.Context(main), ""))


def test_every_command_that_prints_data_takes_the_one_json_option() -> None:
    assert isinstance(main, LazyGroup)
    helps = set()
    for path, command in LEAVES.items():
        options = {p.name: p for p in command.params if isinstance(p, click.Option)}
        if path.split()[0] in NO_DATA:
            assert "as_json" not in options, path
            continue
        assert "as_json" in options, f"`beatflow {path}` prints data but takes no --json"
        option = options["as_json"]
        assert option.opts == ["--json"] and option.is_flag, path
        helps.add(option.help)
    assert len(helps) == 1, helps  # one option, one description


def test_the_help_lists_every_exit_code() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == EXIT_OK
    assert "Exit codes:" in result.output
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<4}{meaning}" in result.output
    assert set(COMMANDS) == {path.split()[0] for path in LEAVES}


def test_a_usage_error_is_one_line_in_the_error_style_with_exit_2() -> None:
    result = CliRunner().invoke(
        main, ["dags", "trigger", "x", "--no-such-option"], prog_name="beatflow"
    )
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    assert result.stderr == (
        "error: No such option '--no-such-option'; see 'beatflow dags trigger --help'\n"
    )


def test_a_bad_setting_is_a_configuration_error_with_exit_2() -> None:
    result = CliRunner().invoke(main, ["runs", "list"], env={"BEATFLOW_DATABASE_URL": "not-a-url"})
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stderr.startswith("error: invalid beatflow settings"), result.stderr
    assert "BEATFLOW_DATABASE_URL" in result.stderr
    assert result.stdout == ""


@pytest.fixture(scope="module")
def env(
    redis_server: services.RedisServer, postgres_server: services.PostgresServer
) -> Iterator[dict[str, str]]:
    """One Redis database and one migrated PostgreSQL database for the module's commands (each
    test's run ids and names are its own): a migration per test took a second of the module's."""
    redis_url = redis_server.fresh_db_url()
    name = f"bf_cli_{uuid.uuid4().hex[:8]}"
    yield cli_env(redis_url, postgres_server.create_database(name), ROOT / "dags")
    services.flush_redis(redis_url)
    postgres_server.drop_database(name)


Call = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def beatflow(env: dict[str, str]) -> Call:
    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_beatflow(env, *argv)

    return call


def _json(done: subprocess.CompletedProcess[str], code: int = EXIT_OK) -> object:
    assert done.returncode == code, f"{done.args} exited {done.returncode}:\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)  # the whole of stdout is one document


def test_every_data_command_prints_one_json_document(beatflow: Call) -> None:
    run_id = f"json-{uuid.uuid4().hex[:8]}"
    checked: set[str] = set()

    def check(path: str, *args: str, code: int = EXIT_OK) -> object:
        checked.add(path)
        return _json(beatflow(*path.split(), *args, "--json"), code)

    assert isinstance(check("config show"), dict)
    listed = check("dags list")
    assert isinstance(listed, dict) and "example_etl" in {d["dag_id"] for d in listed["dags"]}
    assert check("dags check")["ok"] is True
    shown = check("dags show", "example_etl")
    assert shown == _json(beatflow("dags", "show", "example_etl", "--format", "json"))
    assert check("dags pause", "example_etl") == {"dag_id": "example_etl", "paused": True}
    assert check("dags unpause", "example_etl") == {"dag_id": "example_etl", "paused": False}
    # No worker runs: the run stays queued or running, for the operator's verbs below.
    triggered = check("dags trigger", "example_etl", "--run-id", run_id)
    assert triggered["run_id"] == run_id
    backfilled = check(
        "dags backfill", "example_etl", "--start", "2026-01-01T00:00", "--end", "2026-01-01T01:00"
    )
    assert isinstance(backfilled, list) and len(backfilled) == 2
    plan = check(
        "dags backfill", "example_etl", "--start", "2026-01-01T00:00", "--end", "2026-01-01T02:00",
        "--dry-run", "--reprocess", "none",
    )  # fmt: skip
    assert [(e["action"], e["logical_date"]) for e in plan] == [
        ("create", "2026-01-01T02:00:00+00:00")
    ]
    [made] = check("dags backfills list", "example_etl")
    assert (made["runs_total"], made["state"]) == (2, "running"), made
    ended = check("dags backfills cancel", str(made["id"]), "--reason", "test")
    assert ended["state"] == "cancelled" and ended["progress"] == {"cancelled": 2}, ended
    assert run_id in {r["run_id"] for r in check("runs list", "example_etl")}
    assert check("runs show", "example_etl", run_id)["tasks"] == []
    assert check("runs cancel", "example_etl", run_id)["state"] == "cancelled"
    # Nothing ran, so there is nothing to clear: an error, and still nothing on stdout.
    refused = beatflow("runs", "clear", "example_etl", run_id, "--json")
    assert (refused.returncode, refused.stdout) == (EXIT_FAILED, ""), refused.stderr
    assert refused.stderr.startswith("error: cannot clear run"), refused.stderr
    marked = check("runs mark", "example_etl", run_id, "--state", "failed")
    assert marked["state"] == "failed"
    assert isinstance(check("runs audit", "example_etl", run_id), list)
    assert set(check("runs reconcile")) == {"dispatched", "closed", "resumed", "failed"}
    assert isinstance(check("dlq list"), list)
    assert check("dlq purge", "example_etl", "--yes") == {"dag_id": "example_etl", "deleted": 0}
    pool = check("pools set", "warehouse", "3", "--description", "the DWH", "--reason", "new")
    assert (pool["name"], pool["slots"], pool["used"], pool["free"]) == ("warehouse", 3, 0, 3)
    assert [(p["name"], p["slots"]) for p in check("pools list")] == [("warehouse", 3)]
    assert check("pools delete", "warehouse") == {"name": "warehouse", "deleted": True}
    event = check("assets emit", "warehouse.orders", "--extra", '{"rows": 3}', "--reason", "load")
    assert (event["asset"], event["source"], event["extra"]) == (
        "warehouse.orders",
        "external",
        {"rows": 3},
    )
    listed = {a["name"]: a for a in check("assets list")}
    assert listed["warehouse.orders"]["event_count"] >= 1
    shown = check("assets show", "warehouse.orders")
    assert shown["events"][0]["id"] == event["id"]
    assert check("db current")["ok"] is True
    assert "revision" in check("db upgrade")
    assert "deleted" in check("db prune", "--older-than", "3650d")
    assert isinstance(check("tasks list"), list | dict)
    assert isinstance(check("beat status"), dict)
    # A probe that finds nothing healthy still prints its JSON, and exits 1.
    probe = check("health", "worker", "--node", "nobody@x", "--timeout", "1", code=EXIT_FAILED)
    assert probe["healthy"] is False and probe["process"] == "worker"

    # a dead letter or finished task runs (tests/integration/dag/test_cli.py, with a worker); a
    # whole stack of its own (tests/faults)
    needs_fixtures = {"dlq show", "dlq replay", "runs clear", "chaos"}
    untested = {p for p in LEAVES if p.split()[0] not in NO_DATA} - checked - needs_fixtures
    assert not untested, f"add these commands' --json to this test: {sorted(untested)}"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["dags", "trigger", "no_such_dag"], EXIT_FAILED, "no_such_dag"),
        (["runs", "show", "example_etl", "no-such-run"], EXIT_FAILED, "no-such-run"),
        (["dlq", "show", "987654"], EXIT_FAILED, "987654"),
        (["pools", "delete", "no_such_pool"], EXIT_FAILED, "no_such_pool"),
        (["runs", "list", "--limit", "0"], EXIT_USAGE, "--limit"),
        (["dags", "trigger", "example_etl", "--conf", "{bad"], EXIT_USAGE, "JSON"),
    ],
    ids=["unknown-dag", "unknown-run", "unknown-letter", "unknown-pool", "bad-limit", "bad-conf"],
)
def test_errors_are_one_style_on_stderr_with_the_documented_code(
    beatflow: Call, argv: list[str], code: int, says: str
) -> None:
    for extra in ([], ["--json"]):
        done = beatflow(*argv, *extra)
        assert done.returncode == code, f"{argv} exited {done.returncode}:\n{done.stderr}"
        assert done.stdout == "", f"{argv} printed on stdout: {done.stdout!r}"
        assert done.stderr.startswith("error: "), done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_wait_that_times_out_exits_3_with_the_error_on_stderr(beatflow: Call) -> None:
    run_id = f"wait-{uuid.uuid4().hex[:8]}"  # no worker runs: the run cannot finish
    done = beatflow(
        "dags", "trigger", "example_etl", "--run-id", run_id, "--wait", "--timeout", "0.5", "--json"
    )
    assert done.returncode == EXIT_TIMEOUT, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and run_id in done.stderr, done.stderr
