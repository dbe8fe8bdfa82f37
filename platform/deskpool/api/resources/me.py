"""The caller's own identity: ``GET /api/v1/me``, and the permission catalog."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from deskpool.api.context import Call
from deskpool.api.resources.identity_schemas import MeSchema, PermissionListSchema
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.identity.principal import GroupRef, Principal
from deskpool.permissions import EffectivePermissions, PermissionCatalog

#: How many rendered /me bodies one API process keeps (and as many shared second halves).
ME_BODIES_KEPT = 10_000
#: The fields of who the caller is, then of what the caller may do (``MeSchema``'s order).
PERSON_FIELDS = ("id", "issuer", "subject", "email", "display_name", "kind")
ACCESS_FIELDS = ("groups", "roles", "permissions", "is_platform_admin")


#: ``/api/v1/me`` and ``/api/v1/permissions``.
ROUTES = RouteTable()


class MeRenderer:
    """Renders the body of ``/api/v1/me`` once per principal.

    The console asks for it constantly; the authenticator caches a principal until anything
    about it changes, and bodies are keyed by the principal's value, so a changed principal
    never gets another's body. Its second half (groups, roles, permissions: the longest, and
    the same for every member of a team) is rendered once per value too, so a first sign-in
    (9 a.m., issue 39) renders only who the caller is.
    """

    def __init__(self) -> None:
        self._access = MeSchema(only=ACCESS_FIELDS)
        self._bodies: dict[Principal, bytes] = {}
        self._accesses: dict[tuple[tuple[GroupRef, ...], EffectivePermissions], bytes] = {}

    async def get_me(self, call: Call) -> web.Response:
        """The caller: identity, groups, roles and effective permissions."""
        return web.Response(body=self.body(call.caller), content_type="application/json")

    def body(self, principal: Principal) -> bytes:
        """``MeSchema``'s rendering of ``principal`` as JSON."""
        body = self._bodies.get(principal)
        if body is None:
            # Who the caller is: the principal's text attributes of those names (``MeSchema``'s
            # ``String``s, a test checks), rendered as marshmallow would (``str`` of the value,
            # ``None`` kept) without it: its dump was a third of rendering a first sign-in.
            who = {name: _text(getattr(principal, name)) for name in PERSON_FIELDS}
            person = json.dumps(who).encode()
            # Two JSON objects joined into one: ``{person…}`` and ``{access…}``.
            body = person[:-1] + b", " + self._access_of(principal)[1:]
            _keep(self._bodies, principal, body)
        return body

    def _access_of(self, principal: Principal) -> bytes:
        key = (principal.groups, principal.effective)
        access = self._accesses.get(key)
        if access is None:
            access = json.dumps(self._access.dump(_me(principal))).encode()
            _keep(self._accesses, key, access)
        return access


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _keep(bodies: dict[Any, bytes], key: Any, body: bytes) -> None:
    if len(bodies) >= ME_BODIES_KEPT:
        bodies.clear()
    bodies[key] = body


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
