"""The CLI against a real worker: trigger --wait --json, runs list/show, dlq list/show/replay,
pause; the JSON field names are the documented contract."""

from __future__ import annotations

import getpass
import json

import pytest
from click.testing import CliRunner

from beatflow.cli import main

pytestmark = pytest.mark.slow


def cli(cluster, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=cluster.settings_env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_trigger_wait_json_returns_the_run_and_its_tasks_and_exits_zero(cluster):
    code, out = cli(
        cluster, "dags", "trigger", "t_chain", "--wait", "--json", "--run-id", "cli-chain"
    )
    assert code == 0, out
    data = json.loads(out)
    assert {
        "dag_id",
        "run_id",
        "logical_date",
        "state",
        "queued_at",
        "started_at",
        "ended_at",
        "tasks",
    } <= set(data)
    assert data["state"] == "success" and data["run_id"] == "cli-chain"
    join = next(t for t in data["tasks"] if t["task_id"] == "join")
    assert {"task_id", "state", "try_number", "result", "error"} <= set(join)
    assert join["result"] == "LR12" and join["state"] == "success"


def test_a_failed_run_exits_non_zero_and_runs_show_names_the_error(cluster):
    code, out = cli(cluster, "dags", "trigger", "t_rules", "--wait", "--run-id", "cli-rules")
    assert code == 1, out
    code, out = cli(cluster, "runs", "show", "t_rules", "cli-rules", "--json")
    data = json.loads(out)
    broken = next(t for t in data["tasks"] if t["task_id"] == "broken")
    assert broken["state"] == "failed" and "always broken" in broken["error"]
    code, out = cli(cluster, "runs", "list", "t_rules", "--json")
    assert "cli-rules" in [r["run_id"] for r in json.loads(out)]
    code, out = cli(cluster, "runs", "show", "t_rules", "no-such-run")
    assert code == 1 and "no run 'no-such-run'" in out


def test_runs_show_gives_a_skipped_task_run_its_state_and_reason(cluster):
    code, out = cli(cluster, "dags", "trigger", "t_skip_self", "--wait", "--run-id", "cli-skip")
    assert code == 0, out
    code, out = cli(cluster, "runs", "show", "t_skip_self", "cli-skip")
    lines = out.splitlines()
    maybe = next(i for i, line in enumerate(lines) if line.split()[:2] == ["maybe", "skipped"])
    assert lines[maybe + 1].strip() == "reason: no new files today"
    assert any(line.split()[:2] == ["load", "skipped"] for line in lines)
    code, out = cli(cluster, "runs", "show", "t_skip_self", "cli-skip", "--json")
    tasks = {t["task_id"]: t for t in json.loads(out)["tasks"]}
    assert (tasks["maybe"]["state"], tasks["maybe"]["error"]) == ("skipped", "no new files today")


def test_dlq_lists_shows_and_replays_a_dead_letter(cluster):
    code, out = cli(cluster, "dags", "trigger", "t_fixable", "--wait", "--run-id", "cli-fix")
    assert code == 1
    code, out = cli(cluster, "dlq", "list", "t_fixable", "--json")
    letters = [d for d in json.loads(out) if d["run_id"] == "cli-fix"]
    assert len(letters) == 1 and letters[0]["tries"] == 2
    code, out = cli(cluster, "dlq", "show", str(letters[0]["id"]), "--json")
    assert "not fixed yet" in json.loads(out)["traceback"]
    (cluster.marks / "fix-cli-fix").write_text("")
    code, out = cli(
        cluster, "dlq", "replay", str(letters[0]["id"]), "--wait", "--timeout", "60",
        "--actor", "dana",
    )  # fmt: skip
    assert code == 0, out
    trigger, audit = cluster.store.list_audit("t_fixable", "cli-fix")[::-1]
    assert (trigger.action, trigger.actor) == ("trigger", f"cli:{getpass.getuser()}")
    assert (audit.actor, audit.action, audit.detail) == (
        "dana", "replay", {"dead_letter": letters[0]["id"]},
    )  # fmt: skip
    code, out = cli(cluster, "dlq", "replay", str(letters[0]["id"]))
    assert code == 1 and "was replayed" in out
    assert len(cluster.store.list_audit("t_fixable", "cli-fix")) == 2  # a refused replay: none


def test_bad_cli_input_gets_a_clear_error_and_enqueues_nothing(cluster):
    before = len(cluster.store.list_dag_runs("t_chain", limit=1000))
    code, out = cli(cluster, "dags", "trigger", "t_chian")
    assert code == 1 and 'did you mean "t_chain"' in out
    code, out = cli(cluster, "dags", "trigger", "t_chain", "--conf", "[1, 2]")
    assert code == 2 and "must be a JSON object" in out
    code, out = cli(cluster, "dags", "trigger", "t_chain", "--conf", '{"scale": "big"}')
    assert code == 1 and '"scale" must be int' in out
    assert len(cluster.store.list_dag_runs("t_chain", limit=1000)) == before


def test_pause_and_unpause_are_stored(cluster):
    assert cli(cluster, "dags", "pause", "t_chain")[0] == 0
    assert cluster.store.is_paused("t_chain")
    assert cli(cluster, "dags", "unpause", "t_chain")[0] == 0
    assert not cluster.store.is_paused("t_chain")
    code, out = cli(cluster, "dags", "pause", "nope")
    assert code == 1 and 'no DAG "nope"' in out
