"""Server-rendered pages (Jinja2) and their form actions, one module per resource: every form
carries the session's CSRF token and is refused without it."""

from beatflow.web.pages import assets, backfills, dags, live, login, notifications, pools, runs
from beatflow.web.pages.base import login_redirect, router
from beatflow.web.pages.errors import error_page

__all__ = [
    "assets",
    "backfills",
    "dags",
    "error_page",
    "live",
    "login",
    "login_redirect",
    "notifications",
    "pools",
    "router",
    "runs",
]
