"""`beatflow web [--port 8080]`: the web UI and REST API, served by uvicorn; `beatflow web
hash-password` and `beatflow web new-token`: the lines of BEATFLOW_WEB_USERS and
BEATFLOW_WEB_TOKEN_HASHES (secrets read from stdin, never from the command line)."""

from __future__ import annotations

import sys

import click

from beatflow.cli.common import APP_PATH, EXIT_USAGE, CliError, get_app_or_exit, load_settings

ROLES = click.Choice(["viewer", "operator", "admin"])


@click.group(invoke_without_command=True)
@click.option("--port", type=click.IntRange(1, 65535), help="Default: BEATFLOW_WEB_PORT (8080).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.pass_context
def web(ctx: click.Context, port: int | None, host: str) -> None:
    """Serve the web UI and the REST API (/api/v1). Needs a user (BEATFLOW_WEB_PASSWORD,
    BEATFLOW_WEB_USERS or OIDC, each also as _FILE): nothing is served without credentials;
    only GET /healthz is open."""
    if ctx.invoked_subcommand is not None:
        return
    from beatflow.extras import require

    require("web", "beatflow web")
    import uvicorn

    from beatflow.errors import BeatflowError
    from beatflow.logs import configure_logging
    from beatflow.web import create_web_app

    runtime = None
    if ctx.find_root().meta.get(APP_PATH):  # --app: your Celery app, with what init_app set
        from beatflow.runtime import runtime_of

        runtime = runtime_of(get_app_or_exit())
        settings = runtime.settings
    else:
        settings = load_settings()
    configure_logging(settings)
    try:
        app = create_web_app(settings, runtime)
    except BeatflowError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    port = port or settings.web_port
    click.echo(f"beatflow web on http://{host}:{port}/ (user {settings.web_user!r})", err=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,  # our logging (JSON in containers), configured above
        access_log=False,
        proxy_headers=True,
        server_header=False,
    )


def _secret_from_stdin(what: str) -> str:
    """One secret from stdin: prompted (not echoed, asked twice) on a terminal, else its
    first line."""
    if sys.stdin.isatty():
        value: str = click.prompt(what, hide_input=True, confirmation_prompt=True, err=True)
        return value
    return sys.stdin.readline().rstrip("\r\n")


@web.command("hash-password")
@click.option("--user", "name", help="Print the whole line, NAME:ROLE:HASH, for this user.")
@click.option("--role", type=ROLES, default="viewer", show_default=True)
def hash_password(name: str | None, role: str) -> None:
    """Hash a password read from stdin for BEATFLOW_WEB_USERS (scrypt; never from argv)."""
    from beatflow.settings.accounts import NAME_RE
    from beatflow.settings.accounts import hash_password as scrypt_hash

    if name is not None and not NAME_RE.match(name):
        raise CliError("--user: letters, digits, '_', '-', '.', '@' (at most 100)", EXIT_USAGE)
    try:
        hashed = scrypt_hash(_secret_from_stdin("Password"))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    click.echo(f"{name}:{role}:{hashed}" if name else hashed)


@web.command("new-token")
@click.option("--name", required=True, help="The token's name (what the audit log records).")
@click.option("--role", type=ROLES, default="viewer", show_default=True)
@click.option(
    "--stdin", "from_stdin", is_flag=True, help="Hash a token read from stdin instead of a new one."
)
def new_token(name: str, role: str, from_stdin: bool) -> None:
    """A new API token (printed once, on stderr) and its line for BEATFLOW_WEB_TOKEN_HASHES
    (on stdout): only the line goes in the settings."""
    from beatflow.settings.accounts import MIN_TOKEN_CHARS, NAME_RE, hash_token
    from beatflow.settings.accounts import new_token as make_token

    if not NAME_RE.match(name):
        raise CliError("--name: letters, digits, '_', '-', '.', '@' (at most 100)", EXIT_USAGE)
    token = _secret_from_stdin("Token") if from_stdin else make_token()
    if len(token) < MIN_TOKEN_CHARS:
        raise CliError(f"a token needs at least {MIN_TOKEN_CHARS} characters", EXIT_USAGE)
    if not from_stdin:
        click.echo(f"token (shown once; give it to the client): {token}", err=True)
    click.echo(f"{name}:{role}:{hash_token(token)}")
