"""The identity tests' directory of people, and who a caller is."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deskpool.identity.principal import Principal
from deskpool.permissions import EffectivePermissions

PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Person:
    """A user of the test issuer, stored as a first sign-in would store it."""

    id: str
    subject: str
    headers: dict[str, str]


@dataclass
class Directory:
    """Makes people on an API's database and calls the API as them."""

    runtime: Any
    client: Any
    issuer: str
    bearer: Callable[..., dict[str, str]]

    async def person(
        self,
        *,
        permissions: Sequence[str] = (),
        roles: Sequence[str] = (),
        member_of: Sequence[str] = (),
        **claims: Any,
    ) -> Person:
        """A new user holding exactly ``permissions`` and ``roles`` (direct grants).

        ``claims`` go into every token it sends (``groups=[...]`` for bound claim values).
        """
        subject = f"person-{secrets.token_hex(6)}"
        async with self.runtime.db.acquire() as connection:
            user_id = await connection.fetchval(
                "INSERT INTO users (issuer, subject) VALUES ($1, $2) RETURNING id",
                self.issuer,
                subject,
            )
            for permission in permissions:
                await connection.execute(
                    "INSERT INTO grants (subject_type, subject_id, permission) "
                    "VALUES ('user', $1, $2)",
                    user_id,
                    permission,
                )
            for role in roles:
                await connection.execute(
                    "INSERT INTO grants (subject_type, subject_id, role_key) "
                    "VALUES ('user', $1, $2)",
                    user_id,
                    role,
                )
            for group in member_of:
                await connection.execute(
                    "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)", group, user_id
                )
        return Person(str(user_id), subject, self.bearer(subject, **claims))

    async def call(
        self, person: Person, method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        """Call the API as ``person``: the status and the decoded body (``None`` when empty)."""
        kwargs: dict[str, Any] = {"headers": person.headers}
        if body is not None:
            kwargs["json"] = body
        response = await self.client.request(method, path, **kwargs)
        data = await response.json(content_type=None) if response.status != 204 else None
        if response.status >= 400:
            assert response.content_type == PROBLEM, await response.text()
        return response.status, data

    async def group(self, admin: Person, *grants: dict[str, str]) -> str:
        """A new group (made by ``admin``) holding ``grants`` (``{"role_key": ...}``...)."""
        key = f"group-{secrets.token_hex(4)}"
        status, group = await self.call(admin, "POST", "/api/v1/groups", {"key": key, "name": key})
        assert status == 201, group
        for grant in grants:
            status, body = await self.call(
                admin,
                "POST",
                "/api/v1/grants",
                {"subject_type": "group", "subject_id": group["id"], **grant},
            )
            assert status == 201, body
        return str(group["id"])

    async def me(self, person: Person) -> dict[str, Any]:
        """``GET /api/v1/me`` as ``person``."""
        status, body = await self.call(person, "GET", "/api/v1/me")
        assert status == 200, body
        return dict(body)


def principal_of(me: dict[str, Any], *permissions: str) -> Principal:
    """The principal of the user ``me`` (``GET /api/v1/me``) holding exactly ``permissions``."""
    return Principal(
        id=me["id"],
        issuer=me["issuer"],
        subject=me["subject"],
        email=None,
        display_name=None,
        disabled=False,
        groups=(),
        claimed_groups=(),
        claimed_roles=(),
        effective=EffectivePermissions(frozenset(permissions)),
    )
