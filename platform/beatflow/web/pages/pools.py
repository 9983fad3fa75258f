"""The pools page: every pool with its slots used, queued and free (read only; pools are set
with ``beatflow pools set`` or ``PUT /api/v1/pools/{name}``)."""

from __future__ import annotations

from fastapi import Request, Response

from beatflow.web.api.pools import list_pools
from beatflow.web.pages.base import PageUser, render, router


@router.get("/pools")
def pools_page(request: Request, who: PageUser) -> Response:
    return render(request, "pools.html", who, **list_pools(request))
