"""A `beatflow chaos` run in a child process, as CI makes it: its JSON report, after checking that
it ran to its end and every invariant held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.procs import run_beatflow


def chaos_report(workdir: Path, *args: str) -> dict[str, Any]:
    """The report of `beatflow chaos ARGS --json --workdir WORKDIR` (none of this process's
    BEATFLOW_* settings), asserted ok: exit 0, every invariant held, some load was run."""
    result = run_beatflow({}, "chaos", *args, "--json", "--workdir", str(workdir), timeout=560)
    assert result.stdout.strip(), result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout[result.stdout.index("{") :])
    failed = [i for i in report["invariants"] if not i["ok"]]
    assert result.returncode == 0 and report["ok"], json.dumps(failed, indent=2)
    assert report["load"]["dag_runs"] > 0 and report["load"]["task_runs"] > 0
    return report
