"""`beatflow dev`: the whole platform on one machine with nothing configured; `--run DAG_ID` runs
one DAG to completion with a live display and exits 0 on success, 1 otherwise."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from beatflow.app import create_app
from beatflow.cli.common import load_settings, parse_conf, refuse_app
from beatflow.dag.loader import load_dags
from beatflow.dev.display import TaskChangePrinter
from beatflow.dev.stack import DevStack, StackInfo, StopRequested
from beatflow.errors import BeatflowError, DagNotFoundError
from beatflow.extras import require
from beatflow.runs import follow_run, trigger_dag
from beatflow.runtime import runtime_of
from beatflow.settings import mask_url

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@click.command()
@click.option("--run", "dag_id", metavar="DAG_ID", help="Run this DAG to completion, then stop.")
@click.option("--conf", "conf_json", metavar="JSON", help="The run's conf, a JSON object.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --run may take.")
def dev(dag_id: str | None, conf_json: str | None, timeout: float) -> None:
    """Start Redis (unless BEATFLOW_BROKER_URL is set), a SQLite results DB under .beatflow/
    (unless BEATFLOW_DATABASE_URL is set), a worker, two beats, Flower and the exporter.

    Ctrl-C or SIGTERM stops every one of them.
    """
    refuse_app("dev")
    require("embedded", "beatflow dev")
    conf = parse_conf(conf_json)
    if conf is not None and dag_id is None:
        raise click.BadParameter("--conf needs --run DAG_ID", param_hint="--conf")
    # The CLI is the boundary where the environment enters: children inherit it, with the
    # URLs of the stack added.
    stack = DevStack(
        environ=dict(os.environ), settings=load_settings(), cwd=Path.cwd(), echo=click.echo
    )

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stack.request_stop()  # only a flag: see DevStack.request_stop

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    code = 1
    try:
        if dag_id is not None:
            _check_dag_exists(dag_id, stack)
        info = stack.start()
        _print_ready(info, running=dag_id)
        code = _follow(stack, dag_id, conf, timeout) if dag_id else _serve(stack)
    except StopRequested:
        code = 0 if dag_id is None else 130
    except BeatflowError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 1
    finally:
        click.echo("beatflow dev: stopping…")
        stack.stop()
        click.echo("beatflow dev: stopped")
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    raise SystemExit(code)


def _check_dag_exists(dag_id: str, stack: DevStack) -> None:
    """Fail in a second, before anything starts, when the dags folder has no such DAG."""
    bag = load_dags(stack.cwd / stack.settings.dags_folder)
    if dag_id not in bag.dags:
        for error in bag.errors:
            click.echo(f"error: {error}", err=True)
        raise DagNotFoundError(dag_id, list(bag.dags))


def _serve(stack: DevStack) -> int:
    """Run until a stop signal; report children that die; give up if the worker dies."""
    while not stack.stop_requested.wait(0.5):
        if _essential_child_died(stack):
            return 1
    return 0


def _essential_child_died(stack: DevStack) -> bool:
    """Report children that exited; True when one the stack cannot work without is among them."""
    for child in stack.report_dead_children():
        if child.name in ("worker", "redis"):
            click.echo(f"error: {child.name} died; stopping the stack", err=True)
            return True
    return False


def _follow(stack: DevStack, dag_id: str, conf: dict[str, Any] | None, timeout: float) -> int:
    assert stack.child_settings is not None  # set by stack.start()
    app = create_app(stack.child_settings)
    try:
        started = time.monotonic()
        record = trigger_dag(runtime_of(app), dag_id, conf=conf)
        click.echo(f"triggered {dag_id} run {record.run_id}")
        printer = TaskChangePrinter(click.echo)
        deadline = started + timeout
        while True:
            # Follow in short slices, to notice a dead worker instead of waiting out the timeout.
            stack.check_stop()
            slice_s = max(0.1, min(1.0, deadline - time.monotonic()))
            try:
                final = follow_run(
                    runtime_of(app), dag_id, record.run_id, on_task_change=printer, timeout=slice_s
                )
                break
            except TimeoutError:
                if _essential_child_died(stack):
                    return 1
                if time.monotonic() >= deadline:
                    click.echo(
                        f"error: {dag_id} run {record.run_id} did not finish in "
                        f"{timeout:.0f}s; see {stack.supervisor.log_dir}",
                        err=True,
                    )
                    return 1
        took = final.duration_seconds
        took_s = f"{took:.2f}s" if took is not None else f"{time.monotonic() - started:.2f}s"
        click.echo(f"{dag_id} run {final.run_id}: {final.state} in {took_s}")
        return 0 if final.state == "success" else 1
    finally:
        _release_pending_results(app)
        app.close()


def _release_pending_results(app: Any) -> None:
    """Forget the results our sends subscribed to, while the stack's Redis still answers.

    Celery's Redis backend subscribes to every sent task's result and keeps the AsyncResult;
    left alone, their finalisers run at exit, after Redis stopped, and retry for ~20 s.
    """
    backend = app.backend
    pending = getattr(backend, "_pending_results", None)
    for by_id in list(getattr(pending, "concrete", {}).values()):
        for result in list(by_id.values()):
            with contextlib.suppress(Exception):
                backend.remove_pending_result(result)
    consumer = getattr(backend, "result_consumer", None)
    if consumer is not None:
        with contextlib.suppress(Exception):
            consumer.stop()


def _print_ready(info: StackInfo, running: str | None) -> None:
    lines = [
        "beatflow dev: ready",
        f"  flower    {info.flower_url}   user {info.flower_user}   password "
        f"{info.flower_password}",
        f"  web       {info.web_url}   user {info.web_user}   password {info.web_password}",
        f"  metrics   {info.metrics_url}",
        f"  broker    {mask_url(info.broker_url)}",
        f"  database  {mask_url(info.database_url)}",
        f"  worker    {info.worker_node}  queues {','.join(info.queues)}",
        f"  logs      {info.log_dir}/{{worker,beat-1,beat-2,flower}}.log",
        "  in another shell:",
        "    export "
        + " ".join(
            f"{name}={url}"
            for name, url in (
                ("BEATFLOW_BROKER_URL", info.broker_url),
                ("BEATFLOW_DATABASE_URL", info.database_url),
            )
            if mask_url(url) == url  # never echo a password
        ),
        "    beatflow dags list",
        "    beatflow dags trigger example_etl && beatflow runs list example_etl",
    ]
    if running is None:
        lines.append("  Ctrl-C stops everything.")
    click.echo("\n".join(lines))
