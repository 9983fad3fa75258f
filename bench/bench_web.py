"""beatflow web at size: 1,000 DAGs, 100,000 DAG runs and 1,000,000 task runs in PostgreSQL
(COPY), then p50/p95 of pages and API calls served by `beatflow web` (its own process, uvicorn).

    python bench/bench_web.py [--dags 1000] [--runs-per-dag 100] [--tasks 10] [--requests 40]
                              [--postgres-admin-url URL]

The results DB is a throwaway database on the server behind --postgres-admin-url; the dags folder
is generated (one module per DAG, a chain of --tasks tasks). Goal: p95 < 200 ms for every call."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

from beatflow.store import Store  # noqa: E402

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PASSWORD, TOKEN = "bench-password", "bench-token-0123456789abcdef"
STATES = ["success"] * 8 + ["failed", "cancelled"]


def write_dags(folder: Path, dags: int, tasks: int) -> None:
    for d in range(dags):
        lines = [
            "from beatflow import DAG, task",
            "",
            "@task",
            "def step(x=None):",
            "    return 1",
            "",
        ]
        lines.append(f'with DAG("dag_{d:04d}", schedule="{d % 60} * * * *", tags=["bench"]):')
        lines.append("    prev = step.override(task_id='t00')()")
        for t in range(1, tasks):
            lines.append(f"    prev = step.override(task_id='t{t:02d}')(prev)")
        (folder / f"dag_{d:04d}.py").write_text("\n".join(lines) + "\n")


def seed(url: str, dags: int, runs_per_dag: int, tasks: int) -> dict[str, str]:
    """COPY the rows in; returns a sample run to read back."""
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rng = random.Random(7)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY dag_runs (dag_id, run_id, logical_date, trigger, conf, state, queued_at, "
            "started_at, ended_at) FROM STDIN"
        ) as copy:
            for r in range(runs_per_dag):
                for d in range(dags):
                    at = start + timedelta(hours=r, seconds=d)
                    state = rng.choice(STATES) if r < runs_per_dag - 1 else "running"
                    copy.write_row(
                        (
                            f"dag_{d:04d}",
                            f"scheduled__{at.isoformat()}",
                            at,
                            "scheduled",
                            "{}",
                            state,
                            at,
                            at,
                            None if state == "running" else at + timedelta(seconds=30),
                        )
                    )
        with cur.copy(
            "COPY task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, try_number, "
            "worker, celery_task_id, started_at, ended_at, result, error, traceback) FROM STDIN"
        ) as copy:
            for d in range(dags):
                for r in range(runs_per_dag):
                    at = start + timedelta(hours=r, seconds=d)
                    run_id = f"scheduled__{at.isoformat()}"
                    for t in range(tasks):
                        failed = t == tasks - 1 and rng.random() < 0.1
                        copy.write_row(
                            (
                                f"dag_{d:04d}/{run_id}/t{t:02d}",
                                f"dag_{d:04d}",
                                run_id,
                                f"t{t:02d}",
                                -1,
                                "failed" if failed else "success",
                                1,
                                "w1@host",
                                str(uuid.UUID(int=rng.getrandbits(128))),
                                at,
                                at + timedelta(seconds=3),
                                None if failed else "1",
                                "ValueError: x" if failed else None,
                                "Traceback ...\nValueError: x" if failed else None,
                            )
                        )
        with cur.copy(
            "COPY task_logs (dag_id, run_id, task_id, map_index, try_number, created_at, lines) "
            "FROM STDIN"
        ) as copy:
            line = json.dumps(
                [
                    {
                        "ts": "2026-01-01T00:00:00",
                        "level": "info",
                        "logger": "x",
                        "message": "a log line of a bench task",
                    }
                ]
                * 20
            )
            for d in range(0, dags, 10):
                for r in range(runs_per_dag):
                    at = start + timedelta(hours=r, seconds=d)
                    for t in range(tasks):
                        copy.write_row(
                            (
                                f"dag_{d:04d}",
                                f"scheduled__{at.isoformat()}",
                                f"t{t:02d}",
                                -1,
                                1,
                                at,
                                line,
                            )
                        )
        with cur.copy(
            "COPY dead_letters (dedupe_key, dag_id, run_id, task_id, map_index, args, conf, "
            "error, traceback, tries, created_at) FROM STDIN"
        ) as copy:
            for i in range(10_000):
                d = i % dags
                at = start + timedelta(hours=i // dags, seconds=d)
                run_id = f"scheduled__{at.isoformat()}"
                copy.write_row(
                    (
                        f"dag_{d:04d}/{run_id}/t09",
                        f"dag_{d:04d}",
                        run_id,
                        "t09",
                        -1,
                        "{}",
                        "{}",
                        "ValueError: x",
                        "Traceback ...",
                        3,
                        at,
                    )
                )
        conn.commit()
        cur.execute("ANALYZE")
    d = dags // 2 // 10 * 10  # a DAG with logs
    at = start + timedelta(hours=runs_per_dag // 2, seconds=d)
    return {"dag": f"dag_{d:04d}", "run": f"scheduled__{at.isoformat()}"}


def measure(client: httpx.Client, path: str, n: int) -> tuple[float, float, int]:
    client.get(path)  # warm
    times = []
    size = 0
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        size = len(r.content)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))], size


def screenshot(base: str, path: str, out: Path) -> None:
    """Log in with Debian's chromium and save ``path`` as a PNG (the README's picture)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + path)
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("svg.graph")
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    print(f"screenshot of {path}: {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dags", type=int, default=1000)
    ap.add_argument("--runs-per-dag", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--postgres-admin-url", default=ADMIN_URL)
    ap.add_argument("--screenshot", type=Path, help="also save the DAG page as this PNG")
    args = ap.parse_args()
    name = f"bench_web_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(args.postgres_admin_url).set(database=name).render_as_string(False)
    server = None
    try:
        Store(url).upgrade()
        t0 = time.perf_counter()
        sample = seed(url, args.dags, args.runs_per_dag, args.tasks)
        seeded = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as folder:
            write_dags(Path(folder), args.dags, args.tasks)
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")},
                "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}",
                "BEATFLOW_DATABASE_URL": url,
                "BEATFLOW_DAGS_FOLDER": folder,
                "BEATFLOW_WEB_PASSWORD": PASSWORD,
                "BEATFLOW_WEB_TOKENS": f"bench:{TOKEN}",
                "BEATFLOW_LOG_LEVEL": "WARNING",
            }
            argv = [
                sys.executable,
                "-c",
                "from beatflow.cli import run; run()",
                "web",
                "--host",
                "127.0.0.1",
                "--port",
                str(args.port),
            ]
            server = subprocess.Popen(argv, env=env)
            base = f"http://127.0.0.1:{args.port}"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
                deadline = time.monotonic() + 120
                while True:
                    try:
                        if c.get("/api/v1/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit("beatflow web did not start")
                    time.sleep(0.2)
                cursor = c.get("/api/v1/runs", params={"limit": 200}).json()["next_cursor"]
                dag, run = sample["dag"], sample["run"]
                calls = [
                    ("page: DAG list (50 of 1,000 DAGs, last 10 runs each)", "/"),
                    ("page: DAG list, page 6", "/?offset=500"),
                    ("page: DAG (graph + 25 runs x 10 tasks grid)", f"/dags/{dag}"),
                    ("page: run (graph + task runs)", f"/dags/{dag}/runs/{run}"),
                    ("page: task run (tries + 20-line log)", f"/dags/{dag}/runs/{run}/tasks/t05"),
                    ("page: runs, failed, newest 50", "/runs?state=failed"),
                    ("page: dead letters", "/dead-letters"),
                    ("api: GET /dags (50)", "/api/v1/dags"),
                    ("api: GET /dags/{id}", f"/api/v1/dags/{dag}"),
                    ("api: GET /dags/{id}/grid", f"/api/v1/dags/{dag}/grid"),
                    ("api: GET /runs (50)", "/api/v1/runs"),
                    ("api: GET /runs?cursor= (page 2)", f"/api/v1/runs?cursor={cursor}"),
                    ("api: GET /runs?state=running", "/api/v1/runs?state=running"),
                    (
                        "api: GET /dags/{id}/runs?state=failed",
                        f"/api/v1/dags/{dag}/runs?state=failed",
                    ),
                    ("api: GET run with task runs", f"/api/v1/dags/{dag}/runs/{run}"),
                    ("api: GET run status", f"/api/v1/dags/{dag}/runs/{run}/status"),
                    ("api: GET task run", f"/api/v1/dags/{dag}/runs/{run}/tasks/t09"),
                    ("api: GET task run logs", f"/api/v1/dags/{dag}/runs/{run}/tasks/t05/logs"),
                    ("api: GET /dead-letters (50)", "/api/v1/dead-letters"),
                ]
                print(
                    f"seeded {args.dags} DAGs, {args.dags * args.runs_per_dag:,} DAG runs, "
                    f"{args.dags * args.runs_per_dag * args.tasks:,} task runs in {seeded:.0f} s"
                )
                print("| call | p50 ms | p95 ms | bytes |\n|---|---:|---:|---:|")
                worst = 0.0
                for label, path in calls:
                    p50, p95, size = measure(c, path, args.requests)
                    worst = max(worst, p95)
                    print(f"| {label} | {p50:.1f} | {p95:.1f} | {size:,} |", flush=True)
                verdict = "within" if worst < 200 else "OVER"
                print(f"worst p95: {worst:.1f} ms ({verdict} the 200 ms goal)")
            if args.screenshot:
                screenshot(base, f"/dags/{dag}", args.screenshot)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
