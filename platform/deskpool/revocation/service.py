"""End what a change of access took away, in the transaction of that change.

The services that take access away call :func:`revoke_lost_access` inside their transaction
(after the change, before the commit) with the users the change may concern, then
:func:`announce` once committed:

- disabling a user (:func:`deskpool.identity.user_state.set_user_disabled`);
- removing a group member, deleting a group, a grant, a role's permission, a role, or an OIDC
  group claim binding (:mod:`deskpool.identity.service`);
- revoking a pool entitlement (:func:`deskpool.pool_admin.service.revoke_entitlement`).

For each concerned user it reads what they hold now (:class:`~deskpool.revocation.model.Holding`)
and, for what they no longer may keep: asks the gateway holding each such open session to close
it (the disconnect request of an administrator's disconnect, reason ``access_revoked``: the
tunnel closes with ``CLIENT_FORBIDDEN``, and its end logs the user off), and logs the user off a
desktop they are logged on to without a tunnel (the pool's rule after log-off follows: a
persistent desktop stays theirs, ``ready``; a non-persistent one is rebuilt), and cancels a start
on connect not yet handed over (:func:`deskpool.sessions.start_cancel.cancel_start`). Each is
audited under the actor of the change. Tokens not yet redeemed are refused by the gateway's
redemption, which asks :func:`holdings` again
(:meth:`deskpool.sessions.broker.PlatformSessionBroker.redeem`, through
:mod:`deskpool.identity.access`).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, field

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.live.publishers import publish_desktop
from deskpool.outage_brokering.snapshot import mark_access_changed
from deskpool.permissions import resolve_permissions
from deskpool.pools.model import Desktop
from deskpool.revocation import store
from deskpool.revocation.model import Holding, nobody
from deskpool.runtime import Runtime
from deskpool.sessions import store as sessions_store
from deskpool.sessions.model import SessionRecord
from deskpool.sessions.service import AuditOf, log_off, publish_disconnect
from deskpool.sessions.start_cancel import cancel_start
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.starts import store as starts_store

#: Why a desktop is logged off, in its ``desktop.logoff`` audit event.
LOGOFF_REASON = "access revoked"


async def holdings(
    connection: asyncpg.Connection, user_ids: Collection[uuid.UUID], *, exclusive: bool | None
) -> dict[uuid.UUID, Holding]:
    """What each user holds now (a user that no longer exists holds nothing).

    The users' rows are locked first (``FOR UPDATE`` when ``exclusive``, ``FOR SHARE`` when
    not, see :func:`deskpool.revocation.store.lock_users`; with ``None`` only read), then
    everything their holdings are made of is read in one statement, whatever their number.
    """
    if exclusive is not None:
        await store.lock_users(connection, user_ids, exclusive=exclusive)
    read = await store.read_access(connection, user_ids)
    return {user_id: _holding(user_id, read.get(user_id)) for user_id in user_ids}


def _holding(user_id: uuid.UUID, access: store.AccessRead | None) -> Holding:
    if access is None:
        return nobody(user_id)
    effective = resolve_permissions(
        access.user_grants, access.group_grants, access.roles, claimed_roles=access.claimed_roles
    )
    return Holding(user_id, access.disabled, effective, access.entitled_pools)


async def holding_of(
    connection: asyncpg.Connection, user_id: uuid.UUID, *, locked: bool = False
) -> Holding:
    """What one user holds now, their row shared-locked (a token's redemption).

    Two statements, or one when the caller's transaction has ``locked`` the row already (the
    redemption's, :func:`deskpool.sessions.store_tokens.redeem_token`): the lock first, then
    everything the holding is made of in one read whose snapshot sees what a revocation that
    held the lock committed.
    """
    return (await holdings(connection, [user_id], exclusive=None if locked else False))[user_id]


@dataclass
class Revocation:
    """What :func:`revoke_lost_access` ended: sessions asked to close, desktops logged off."""

    closing: list[SessionRecord] = field(default_factory=list)
    logged_off: list[Desktop] = field(default_factory=list)
    #: Desktops whose pending start on connect was cancelled (released as the pool's rule says).
    cancelled: list[Desktop] = field(default_factory=list)
    #: The users the change concerned (``None``: it may concern anyone).
    users: frozenset[uuid.UUID] | None = None


async def users_of_group(connection: asyncpg.Connection, group_id: uuid.UUID) -> list[uuid.UUID]:
    """The users a change of the group concerns: its members and its bound claims' holders.

    Call it before a change that removes the memberships or bindings (deleting the group).
    """
    return await store.users_of_group(connection, group_id)


async def users_with_claim(connection: asyncpg.Connection, claim_value: str) -> list[uuid.UUID]:
    """The users a change of the binding of ``claim_value`` concerns."""
    return await store.users_with_claim(connection, claim_value)


async def revoke_lost_access(
    connection: asyncpg.Connection,
    audit: AuditOf,
    users: Collection[uuid.UUID] | None = None,
) -> Revocation:
    """End what ``users`` (``None``: everyone holding a desktop or a session) no longer may keep.

    Run it in the transaction of the change, after the change; call :func:`announce` after the
    commit.

    :param audit: builds the audit events, as the actor of the change.
    """
    concerned = None if users is None else frozenset(users)
    if users is None:
        users = await store.users_holding_desktops(connection)
    ids = sorted(set(users))
    revocation = Revocation(users=concerned)
    if not ids:
        return revocation
    held = await holdings(connection, ids, exclusive=True)
    for session in await store.open_sessions_of(connection, ids):
        if held[session.user_id].keeps_session(session.pool_id, read_only=session.read_only):
            continue
        asked = await sessions_store.request_revocation(connection, session.id)
        if asked is None:
            continue
        revocation.closing.append(asked)
        await record_audit_event(
            connection,
            audit(
                "session.disconnect",
                "sessions",
                str(session.id),
                {
                    "reason": str(SessionEndReason.ACCESS_REVOKED),
                    "user_id": str(session.user_id),
                    "desktop_id": str(session.desktop_id),
                    "pool_id": str(session.pool_id),
                    "read_only": session.read_only,
                    "gateway_id": session.gateway_id,
                },
            ),
        )
    for desktop in await store.desktops_in_use_by(connection, ids):
        if held[desktop.user_id].keeps_desktop(desktop.pool_id):
            continue
        # With a tunnel still open, log_off waits: the tunnel's end (access_revoked) logs off.
        after = await log_off(connection, desktop.desktop_id, LOGOFF_REASON, audit)
        if after is not None:
            revocation.logged_off.append(after)
    for start in await starts_store.pending_starts_of(connection, ids):
        if held[start.user_id].keeps_desktop(start.pool_id):
            continue
        reason = str(SessionEndReason.ACCESS_REVOKED)
        cancelled = await cancel_start(
            connection, start.desktop_id, reason, audit, user_id=start.user_id
        )
        if cancelled is not None:
            revocation.cancelled.append(cancelled)
    return revocation


async def announce(runtime: Runtime, revocation: Revocation) -> None:
    """After the commit: tell the gateways holding the sessions, publish the desktops' states.

    The outage snapshot is marked first: nothing is brokered from it to the users concerned
    (to anyone, when the change may concern anyone) until it is read again
    (:func:`deskpool.outage_brokering.snapshot.mark_access_changed`).
    """
    await mark_access_changed(runtime, revocation.users)
    for session in revocation.closing:
        await publish_disconnect(runtime, session)
    for desktop in [*revocation.logged_off, *revocation.cancelled]:
        await publish_desktop(runtime, desktop)
