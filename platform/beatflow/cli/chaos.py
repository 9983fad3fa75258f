"""`beatflow chaos`: the stack under seeded faults, then a check that nothing was lost."""

from __future__ import annotations

from pathlib import Path

import click

from beatflow.chaos.faults_rabbitmq import BROKERS, faults_for
from beatflow.cli.common import echo_json, json_option, refuse_app


def _kinds(value: str, broker: str) -> tuple[str, ...]:
    known = faults_for(broker)
    if value == "all":
        return tuple(known)
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds:
        raise click.BadParameter(
            f"unknown fault kind(s) {', '.join(unknown) or '(none given)'} on {broker}; "
            f"known: all, {', '.join(known)}",
            param_hint="'--faults'",
        )
    return kinds


@click.command()
@click.option(
    "--duration",
    type=click.FloatRange(5, 86_400),
    default=120,
    show_default=True,
    help="Seconds of fault injection, at least: every chosen fault kind is injected once.",
)
@click.option(
    "--seed",
    type=int,
    default=1,
    show_default=True,
    help="Seed of the fault schedule and the manual triggers: same seed, same run.",
)
@click.option("--workers", type=click.IntRange(2, 3), default=2, show_default=True)
@click.option(
    "--broker",
    type=click.Choice(BROKERS),
    default="redis",
    show_default=True,
    help="Where the queues live: the run's own Redis, or a RabbitMQ node of its own (Redis "
    "then keeps the beat's lock, schedules and results) with RabbitMQ's faults added.",
)
@click.option(
    "--faults",
    "fault_kinds",
    default="all",
    show_default=True,
    help="Comma-separated fault kinds, or 'all'.",
)
@click.option(
    "--min-gap",
    type=click.FloatRange(0.5, 600),
    default=3.0,
    show_default=True,
    help="Fewest seconds between two faults.",
)
@click.option("--max-gap", type=click.FloatRange(0.5, 600), default=8.0, show_default=True)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(10, 3600),
    default=300,
    show_default=True,
    help="Seconds the runs get to end after the last fault.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where servers, DAGs and logs live (default: a new temporary folder).",
)
@click.option("--keep", is_flag=True, help="Keep the work folder (it is kept anyway on failure).")
@click.option(
    "--database-url",
    default=None,
    help="Use this PostgreSQL instead of one of the run's own (its faults are skipped).",
)
@click.option(
    "--clock-skew",
    type=click.FloatRange(-3600, 3600),
    default=0.0,
    show_default=True,
    help="Run the last worker with its clock shifted by this many seconds (needs libfaketime).",
)
@json_option
def chaos(
    duration: float,
    seed: int,
    workers: int,
    broker: str,
    fault_kinds: str,
    min_gap: float,
    max_gap: float,
    drain_timeout: float,
    workdir: Path | None,
    keep: bool,
    database_url: str | None,
    clock_skew: float,
    as_json: bool,
) -> None:
    """Start a full local stack (own Redis with AOF, own PostgreSQL, with --broker rabbitmq an
    own RabbitMQ node, workers, 2 beats, the exporter), inject faults at seeded random moments,
    drain, and check the invariants: every tick made exactly one run, every run is final, side
    effects happened once, dead letters are exactly the failed task runs, metrics agree with the
    database, no slot leaked. Exits 1 if any invariant fails."""
    refuse_app("chaos")
    from beatflow.chaos.runner import ChaosOptions, ChaosRun

    if min_gap > max_gap:
        raise click.BadParameter(f"--min-gap {min_gap} is above --max-gap {max_gap}")
    options = ChaosOptions(
        duration=duration,
        seed=seed,
        workers=workers,
        faults=_kinds(fault_kinds, broker),
        gap=(min_gap, max_gap),
        drain_timeout=drain_timeout,
        workdir=workdir,
        keep=keep,
        database_url=database_url,
        clock_skew=clock_skew,
        broker=broker,
    )
    echo = (lambda _line: None) if as_json else click.echo
    report = ChaosRun(options, echo=echo).run()
    if as_json:
        echo_json(report.as_dict())
    else:
        click.echo(report.text())
    if not report.ok:
        raise SystemExit(1)
