"""The caller's own identity: ``GET /api/v1/me``, and the permission catalog."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from deskpool.api.context import Call
from deskpool.api.resources.identity_schemas import MeSchema, PermissionListSchema
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.identity.principal import Principal
from deskpool.permissions import PermissionCatalog

#: How many rendered /me bodies one API process keeps.
ME_BODIES_KEPT = 10_000


#: ``/api/v1/me`` and ``/api/v1/permissions``.
ROUTES = RouteTable()


class MeRenderer:
    """Renders the body of ``/api/v1/me`` once per principal.

    The console asks for it constantly; the authenticator caches a principal until anything
    about it changes, and bodies are keyed by the principal's value, so a changed principal
    never gets another's body.
    """

    def __init__(self) -> None:
        self._schema = MeSchema()
        self._bodies: dict[Principal, bytes] = {}

    async def get_me(self, call: Call) -> web.Response:
        """The caller: identity, groups, roles and effective permissions."""
        principal = call.caller
        body = self._bodies.get(principal)
        if body is None:
            body = json.dumps(self._schema.dump(_me(principal))).encode()
            if len(self._bodies) >= ME_BODIES_KEPT:
                self._bodies.clear()
            self._bodies[principal] = body
        return web.Response(body=body, content_type="application/json")


#: The one renderer of ``/api/v1/me`` of this process.
_RENDERER = MeRenderer()


@ROUTES.route(
    "GET",
    "/api/v1/me",
    summary="The caller: identity, groups, roles and effective permissions",
    tags=("me",),
    permission=None,
    authenticated=True,
    responses={200: ResponseSpec("The caller.", MeSchema)},
)
async def get_me(call: Call) -> web.Response:
    """The caller, rendered once per principal (:class:`MeRenderer`)."""
    return await _RENDERER.get_me(call)


def _me(principal: Principal) -> dict[str, Any]:
    return {
        "id": principal.id,
        "issuer": principal.issuer,
        "subject": principal.subject,
        "email": principal.email,
        "display_name": principal.display_name,
        "kind": principal.kind,
        "groups": [vars(group) for group in principal.groups],
        "roles": sorted(principal.effective.roles),
        "permissions": sorted(principal.effective.permissions),
        "is_platform_admin": principal.effective.is_platform_admin,
    }


@ROUTES.route(
    "GET",
    "/api/v1/permissions",
    summary="The permission catalog",
    tags=("roles",),
    permission="roles:read",
    responses={200: ResponseSpec("Every permission.", PermissionListSchema)},
)
async def list_permissions(call: Call) -> dict[str, Any]:
    """Every permission of the catalog."""
    items = []
    for name in sorted(PermissionCatalog.builtin()):
        resource, _, action = name.partition(":")
        items.append({"name": name, "resource": resource, "action": action})
    return {"items": items}
