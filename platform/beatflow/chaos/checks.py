"""The invariants a chaos run must end with, read from the results database, the ledger tables
and the exporter's /metrics. Each check returns a ``Check``: its name, whether it held, and the
evidence (counts, and the first offending rows when it did not)."""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from beatflow.chaos.workload import DOOMED_TASKS, SCHEDULED
from beatflow.dag.schedule import Schedule
from beatflow.states import DAG_RUN_FINAL, DagRunState, TaskRunState
from beatflow.times import as_utc

FINAL = tuple(str(s) for s in DAG_RUN_FINAL)
SHOWN = 5  # offending rows shown per failed check


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    evidence: list[Any] = field(default_factory=list)


def expected_ticks(dag_id: str, start: datetime, stop: datetime) -> list[datetime]:
    """Ticks of a scheduled chaos DAG strictly after its start date, up to ``stop``."""
    schedule = Schedule.parse(timedelta(seconds=SCHEDULED[dag_id]), Schedule().timezone, start)
    return list(schedule.ticks(start, stop))


def check_ticks(conn: sa.Connection, start: datetime, stop: datetime) -> Check:
    """1. Every tick inside the window produced exactly one DAG run: none missing, none doubled."""
    missing: list[str] = []
    doubled: list[str] = []
    total = 0
    for dag_id in SCHEDULED:
        rows = conn.execute(
            sa.text(
                "SELECT logical_date FROM dag_runs WHERE dag_id = :d AND trigger <> 'manual' "
                "AND logical_date <= :stop"
            ),
            {"d": dag_id, "stop": stop},
        ).all()
        seen = Counter(as_utc(r[0]) for r in rows)
        ticks = expected_ticks(dag_id, start, stop)
        total += len(ticks)
        missing += [f"{dag_id}@{t.isoformat()}" for t in ticks if seen[t] == 0]
        doubled += [f"{dag_id}@{t.isoformat()} x{n}" for t, n in seen.items() if n > 1]
    ok = not missing and not doubled
    detail = f"{total} ticks, {len(missing)} missing, {len(doubled)} doubled"
    return Check("every tick made exactly one run", ok, detail, (missing + doubled)[:SHOWN])


def check_runs_final(conn: sa.Connection) -> Check:
    """2. Every DAG run reached a final state."""
    rows = conn.execute(
        sa.text("SELECT dag_id, run_id, state FROM dag_runs WHERE state NOT IN :final").bindparams(
            sa.bindparam("final", expanding=True)
        ),
        {"final": list(FINAL)},
    ).all()
    total = conn.execute(sa.text("SELECT count(*) FROM dag_runs")).scalar_one()
    return Check(
        "every DAG run is final",
        not rows,
        f"{total} runs, {len(rows)} not final",
        [f"{d}/{r}: {s}" for d, r, s in rows[:SHOWN]],
    )


def check_effects(conn: sa.Connection) -> Check:
    """3. Every task run that succeeded has its ledger row; no try of a key ran its effect twice."""
    missing = conn.execute(
        sa.text(
            "SELECT tr.dedupe_key FROM task_runs tr LEFT JOIN chaos_ledger l "
            "ON l.dedupe_key = tr.dedupe_key WHERE tr.state = 'success' AND l.dedupe_key IS NULL "
            "AND NOT (tr.task_id = 'work' AND tr.map_index < 0)"
        )
    ).all()
    doubled = conn.execute(
        sa.text(
            "SELECT dedupe_key, try_number, count(*) FROM chaos_attempts "
            "GROUP BY dedupe_key, try_number HAVING count(*) > 1"
        )
    ).all()
    succeeded = conn.execute(
        sa.text("SELECT count(*) FROM task_runs WHERE state = 'success'")
    ).scalar_one()
    ok = not missing and not doubled
    detail = (
        f"{succeeded} task runs succeeded, {len(missing)} without their effect, "
        f"{len(doubled)} tries that ran their effect twice"
    )
    evidence = [f"no effect: {r[0]}" for r in missing[:SHOWN]]
    evidence += [f"try {t} of {k} ran {n} times" for k, t, n in doubled[:SHOWN]]
    return Check("side effects happened once", ok, detail, evidence)


def check_dead_letters(conn: sa.Connection) -> Check:
    """4. Every task that failed for good is a dead letter, and nothing else is."""
    failed = {
        r[0]
        for r in conn.execute(
            sa.text("SELECT dedupe_key FROM task_runs WHERE state = :s"), {"s": TaskRunState.FAILED}
        )
    }
    letters = {
        r[0]
        for r in conn.execute(
            sa.text("SELECT dedupe_key FROM dead_letters WHERE replayed_at IS NULL")
        )
    }
    doomed_runs = conn.execute(
        sa.text("SELECT count(*) FROM dag_runs WHERE dag_id = 'chaos_doomed' AND state <> :c"),
        {"c": DagRunState.CANCELLED},
    ).scalar_one()
    doomed_failed = sum(1 for k in failed if any(f"{d}/" in k and t in k for d, t in DOOMED_TASKS))
    only_failed = sorted(failed - letters)
    only_letter = sorted(letters - failed)
    ok = not only_failed and not only_letter and doomed_failed >= doomed_runs
    detail = (
        f"{len(failed)} failed task runs, {len(letters)} dead letters; {doomed_failed} of "
        f"{doomed_runs} doomed runs failed as they must"
    )
    evidence = [f"failed, no dead letter: {k}" for k in only_failed[:SHOWN]]
    evidence += [f"dead letter, not failed: {k}" for k in only_letter[:SHOWN]]
    return Check("dead letters are exactly the failed task runs", ok, detail, evidence)


METRIC_RE = re.compile(r'^beatflow_dag_runs_by_state\{dag="([^"]+)",state="([^"]+)"\} ([0-9.e+]+)$')
LETTERS_RE = re.compile(r"^beatflow_dead_letters ([0-9.e+]+)$")
FAILOVERS_RE = re.compile(r"^beatflow_beat_failovers_total ([0-9.e+]+)$")


def scrape(url: str) -> tuple[dict[tuple[str, str], int], int | None, int | None]:
    """(runs by DAG and state, dead letters, beat failovers) as the exporter shows them."""
    with urllib.request.urlopen(url, timeout=5) as response:  # our own exporter
        text = response.read().decode()
    runs: dict[tuple[str, str], int] = {}
    letters: int | None = None
    failovers: int | None = None
    for line in text.splitlines():
        if m := METRIC_RE.match(line):
            runs[(m.group(1), m.group(2))] = int(float(m.group(3)))
        elif m := LETTERS_RE.match(line):
            letters = int(float(m.group(1)))
        elif m := FAILOVERS_RE.match(line):
            failovers = int(float(m.group(1)))
    return runs, letters, failovers


def db_counts(conn: sa.Connection) -> tuple[dict[tuple[str, str], int], int]:
    runs = {
        (d, s): int(n)
        for d, s, n in conn.execute(
            sa.text("SELECT dag_id, state, count(*) FROM dag_runs GROUP BY dag_id, state")
        )
    }
    letters = conn.execute(
        sa.text("SELECT count(*) FROM dead_letters WHERE replayed_at IS NULL")
    ).scalar_one()
    return runs, int(letters)


def check_metrics(conn: sa.Connection, metrics_url: str, takeovers: int = 0) -> Check:
    """5. The exporter agrees with the database (runs by state, dead letters) and counted at
    least the beat failovers the run caused and saw."""
    try:
        shown, letters, failovers = scrape(metrics_url)
    except OSError as exc:
        return Check("metrics agree with the database", False, f"exporter unreachable: {exc}")
    runs, db_letters = db_counts(conn)
    wrong = [
        f"{d}/{s}: metrics {shown.get((d, s), 0)}, database {n}"
        for (d, s), n in sorted(runs.items())
        if shown.get((d, s), 0) != n
    ]
    if letters != db_letters:
        wrong.append(f"dead letters: metrics {letters}, database {db_letters}")
    if (failovers or 0) < takeovers:
        wrong.append(f"beat failovers: metrics {failovers}, seen by the run {takeovers}")
    return Check(
        "metrics agree with the database",
        not wrong,
        f"{sum(runs.values())} runs, {db_letters} dead letters and {takeovers} failovers compared",
        wrong[:SHOWN],
    )


def running_by_dag(conn: sa.Connection) -> dict[str, int]:
    """How many runs of each DAG are running now (the sampler's reading)."""
    rows = conn.execute(
        sa.text("SELECT dag_id, count(*) FROM dag_runs WHERE state = 'running' GROUP BY dag_id")
    ).all()
    return {str(d): int(n) for d, n in rows}


def check_slots(conn: sa.Connection, limits: dict[str, int], peaks: dict[str, int]) -> Check:
    """6. No max_active_runs slot leaked or was exceeded: nothing active once drained, and no
    reading of the database during the run saw more runs of a DAG running than its limit."""
    active = conn.execute(
        sa.text("SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')")
    ).scalar_one()
    over = [
        f"{dag_id}: {peak} running at once, limit {limits[dag_id]}"
        for dag_id, peak in sorted(peaks.items())
        if dag_id in limits and peak > limits[dag_id]
    ]
    return Check(
        "max_active_runs held and no slot leaked",
        active == 0 and not over,
        f"{active} runs still active after the drain, {len(over)} DAGs over their limit "
        f"(peaks {dict(sorted(peaks.items()))})",
        over[:SHOWN],
    )
