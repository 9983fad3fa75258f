"""`beatflow web [--port 8080]`: the web UI and REST API, served by uvicorn."""

from __future__ import annotations

import click

from beatflow.cli.common import load_settings


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), help="Default: BEATFLOW_WEB_PORT (8080).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
def web(port: int | None, host: str) -> None:
    """Serve the web UI and the REST API (/api/v1). Needs BEATFLOW_WEB_PASSWORD (or _FILE):
    nothing is served without credentials; only GET /healthz is open."""
    from beatflow.extras import require

    require("web", "beatflow web")
    import uvicorn

    from beatflow.errors import BeatflowError
    from beatflow.logs import configure_logging
    from beatflow.web import create_web_app

    settings = load_settings()
    configure_logging(settings)
    try:
        app = create_web_app(settings)
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
