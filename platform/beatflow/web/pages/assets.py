"""The assets page: each asset's lineage (producers -> asset -> consumers) and newest events,
with the runs that consumed them."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from beatflow.web import actions
from beatflow.web.deps import runtime
from beatflow.web.pages.base import PageUser, render, router


@router.get("/assets")
def assets_page(request: Request, who: PageUser) -> Response:
    from beatflow.runs.assets import assets_overview

    with actions.api_errors():
        assets = assets_overview(runtime(request), events=5)
    return render(request, "assets.html", who, assets=assets)
