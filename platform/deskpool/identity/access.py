"""The seam to revocation: what a change of access took away ends, and access is judged now.

A change of a user, a group, a role, a grant or a claim binding may take access away; what it
took away (sessions, desktops in use, pending starts on connect) is ended in that change's
transaction by :mod:`deskpool.revocation.service`, and the session broker asks it whether the
user still holds what a token was issued for before the token opens anything. Revocation reads
and ends sessions and starts, so it sits above identity and sessions in the layer order
(``tests/unit/test_layers.py``): identity's use cases and the broker reach it through this seam
instead of importing it, the way :mod:`deskpool.reconciliation.jobs` reaches the reconciliation
service through a factory.

The composition fills the seam in (:func:`install`, with :mod:`deskpool.revocation.service`
itself): the API's application (:func:`deskpool.api.app.create_app`), the gateway's broker
(``deskpool_gateway``) and the test plugin (:mod:`deskpool.testing.pytest_plugin`). A seam never
filled in raises rather than let access that was taken away go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from deskpool.events import AuditEvent

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

#: Builds the audit event of a change: ``(action, resource_type, resource_id, details)``.
AuditOf = Callable[[str, str, str | None, dict[str, Any]], AuditEvent]


class Holding(Protocol):
    """What a user holds now, as the broker and start on connect ask it."""

    def keeps_session(self, pool_id: uuid.UUID, *, read_only: bool) -> bool:
        """Whether the user may keep (or open) a session on a desktop of ``pool_id``."""
        ...

    def keeps_desktop(self, pool_id: uuid.UUID) -> bool:
        """Whether the user may keep a desktop of ``pool_id`` (or one started for him)."""
        ...


class Revocation(Protocol):
    """What :meth:`Revoker.revoke_lost_access` ended, for :meth:`Revoker.announce`."""


class Revoker(Protocol):
    """Revocation as identity and the broker call it (:mod:`deskpool.revocation.service`)."""

    async def revoke_lost_access(
        self,
        connection: asyncpg.Connection,
        audit: AuditOf,
        users: Collection[uuid.UUID] | None = None,
    ) -> Revocation:
        """End what ``users`` (``None``: everyone holding something) may no longer keep."""
        ...

    async def announce(self, runtime: Runtime, revocation: Any) -> None:
        """After the commit: tell the gateways and publish what ``revocation`` ended."""
        ...

    async def holding_of(
        self, connection: asyncpg.Connection, user_id: uuid.UUID, *, locked: bool = False
    ) -> Holding:
        """What one user holds now (his row shared-locked; already, when ``locked``)."""
        ...

    async def users_of_group(
        self, connection: asyncpg.Connection, group_id: uuid.UUID
    ) -> list[uuid.UUID]:
        """The users a change of the group concerns."""
        ...

    async def users_with_claim(
        self, connection: asyncpg.Connection, claim_value: str
    ) -> list[uuid.UUID]:
        """The users a change of the binding of ``claim_value`` concerns."""
        ...


_revoker: Revoker | None = None


def install(revoker: Revoker) -> None:
    """Fill the seam in (at composition; installing the same revoker again changes nothing)."""
    global _revoker
    _revoker = revoker


def revoker() -> Revoker:
    """The revoker the composition installed.

    :raises RuntimeError: none was: a process that changes access must compose revocation.
    """
    if _revoker is None:
        raise RuntimeError(
            "revocation is not composed: call deskpool.identity.access.install("
            "deskpool.revocation.service) where the process is put together"
        )
    return _revoker


# The calls, as the callers below revocation make them (each through the installed revoker).


async def revoke_lost_access(
    connection: asyncpg.Connection, audit: AuditOf, users: Collection[uuid.UUID] | None = None
) -> Revocation:
    """End, in the change's transaction, what ``users`` may no longer keep."""
    return await revoker().revoke_lost_access(connection, audit, users)


async def announce(runtime: Runtime, revocation: Revocation) -> None:
    """After the commit: tell the gateways and publish what ``revocation`` ended."""
    await revoker().announce(runtime, revocation)


async def holding_of(
    connection: asyncpg.Connection, user_id: uuid.UUID, *, locked: bool = False
) -> Holding:
    """What one user holds now (his row shared-locked): a token's redemption asks it.

    :param locked: the caller's transaction has share-locked the user's row in an earlier
        statement (a token's redemption does), so it is not locked again.
    """
    return await revoker().holding_of(connection, user_id, locked=locked)


async def users_of_group(connection: asyncpg.Connection, group_id: uuid.UUID) -> list[uuid.UUID]:
    """The users a change of the group concerns: its members and its bound claims' holders."""
    return await revoker().users_of_group(connection, group_id)


async def users_with_claim(connection: asyncpg.Connection, claim_value: str) -> list[uuid.UUID]:
    """The users a change of the binding of ``claim_value`` concerns."""
    return await revoker().users_with_claim(connection, claim_value)
