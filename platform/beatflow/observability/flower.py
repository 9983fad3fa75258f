"""Flower with authentication on by default: when this process runs ``celery -A beatflow flower``,
basic auth comes from BEATFLOW_FLOWER_USER / BEATFLOW_FLOWER_PASSWORD unless the operator
configured Flower's own auth (``--basic-auth``, ``--auth`` for OAuth, FLOWER_* variables or a
flowerconfig.py); with none of these Flower refuses to start instead of running open.

How: Flower parses its options with tornado after Celery has loaded our app, and tornado runs
the parse callbacks registered on its ``options`` object once the command line (and the config
file, when there is one) has been read. We register one callback that fills in the default or
stops the process.

Flower's memory is bounded the same way: before Flower reads its options, beatflow sets the
defaults of ``max_tasks``, ``max_workers`` and ``purge_offline_workers`` from
BEATFLOW_FLOWER_MAX_TASKS / _MAX_WORKERS / _PURGE_OFFLINE_WORKERS (Flower's own 100,000 tasks
grew its RSS by ~15 MB/min for over an hour at 30 task runs/s); a ``--max_tasks`` flag, a
FLOWER_MAX_TASKS variable or a flowerconfig.py still wins."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from beatflow.settings import Settings

log = logging.getLogger(__name__)

NO_PASSWORD = (
    "beatflow refuses to start Flower without authentication: set BEATFLOW_FLOWER_PASSWORD "
    "(and BEATFLOW_FLOWER_USER, default 'admin') for basic auth, or configure Flower's own "
    "authentication (--basic-auth=user:password, or --auth=<email regex> with the "
    "--oauth2_* options / FLOWER_OAUTH2_* variables)."
)


def is_flower_command() -> bool:
    """True while ``celery ... flower`` is loading the app in this process."""
    try:
        import click
    except ImportError:  # pragma: no cover - click comes with celery
        return False
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.invoked_subcommand == "flower"


def configure_if_flower(settings: Settings) -> bool:
    """Install the authentication default when this process is starting Flower."""
    if not is_flower_command():
        return False
    apply_bounds(settings)
    install_auth_default(settings)
    return True


def apply_bounds(settings: Settings) -> None:
    """Set Flower's memory bounds from ``settings`` as defaults that its options override."""
    import flower.options  # noqa: F401 - defines Flower's options on tornado's object
    from tornado.options import options

    options.max_tasks = settings.flower_max_tasks
    options.max_workers = settings.flower_max_workers
    purge = settings.flower_purge_offline_workers
    options.purge_offline_workers = purge if purge > 0 else None


def has_auth(options: Any) -> bool:
    """Whether Flower's options already turn some authentication on."""
    return bool(options.basic_auth or options.auth)


def apply_auth_default(options: Any, settings: Settings) -> None:
    """Fill in basic auth from ``settings`` unless auth is configured; exit if it cannot be."""
    if has_auth(options):
        return
    if not settings.flower_password:
        print(f"error: {NO_PASSWORD}", file=sys.stderr)
        raise SystemExit(2)
    options.basic_auth = [f"{settings.flower_user}:{settings.flower_password}"]
    log.info(
        "Flower basic auth on for user %s (from BEATFLOW_FLOWER_USER/PASSWORD)",
        settings.flower_user,
    )


def install_auth_default(settings: Settings) -> None:
    """Register the tornado parse callback that applies :func:`apply_auth_default`."""
    import flower.options  # noqa: F401 - defines Flower's options on tornado's object
    from tornado.options import options

    calls = {"n": 0}

    def callback() -> None:
        calls["n"] += 1
        # With a config file Flower parses the command line, the file, then the command line
        # again: only the last pass sees everything.
        conf = os.path.abspath(str(options.conf))
        if calls["n"] == 1 and os.path.exists(conf):
            return
        apply_auth_default(options, settings)

    options.add_parse_callback(callback)
