"""/api/v1: who is asking (any role), and who has access (admins only: the names and roles of
the users and tokens, never a secret or a hash)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from beatflow.settings.accounts import Role
from beatflow.web import ops_models
from beatflow.web.api.base import AdminUser, ApiUser, router
from beatflow.web.deps import auth_of


@router.get("/me", response_model=ops_models.Me)
def who_am_i(who: ApiUser) -> dict[str, Any]:
    """The caller: its name, how it authenticated, its role and what that role may do."""
    return {
        "actor": who.actor,
        "name": who.name,
        "via": who.via,
        "role": who.role.label,
        "may": [r.label for r in Role if who.can(r)],
    }


@router.get("/access", response_model=ops_models.Access)
def list_access(request: Request, who: AdminUser) -> dict[str, Any]:
    """The users and API tokens of the settings with their roles (admins only; no secrets).
    OIDC users are not listed: their role comes from the provider at each login."""
    auth = auth_of(request)
    return {
        "users": [
            {"name": name, "role": role.label} for name, (role, _) in sorted(auth.users.items())
        ],
        "tokens": [{"name": name, "role": role.label} for name, role in auth.token_names],
        "oidc": auth.oidc_enabled,
    }
