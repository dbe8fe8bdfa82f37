"""The help desk's user page: who he is, his sessions, logons, desktops, and every pool judged.

Read in one connection (a consistent enough picture for a person looking at it), from the
stores of identity, pools, desktops, sessions and the license. Whether he can open a pool is
judged by :func:`deskpool.helpdesk.model.judge` from his groups and permissions *as of his last
sign-in* (the claims kept then), exactly as revocation judges him while he is away.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskpool.actor import Actor
from deskpool.desktops import store as store_desktops
from deskpool.errors import NotFound
from deskpool.helpdesk import store
from deskpool.helpdesk.model import Access, Path, PoolFacts, judge
from deskpool.identity import store as identity_store
from deskpool.identity.sign_in import resolve_effective
from deskpool.licensing.model import Resource
from deskpool.licensing.service import license_state
from deskpool.notices import service as notices
from deskpool.permissions import has_permission
from deskpool.pools import store as store_pools
from deskpool.pools.model import Desktop, DesktopState
from deskpool.sessions import store as session_store
from deskpool.sessions.logons import LogonRecord
from deskpool.sessions.model import SessionRecord
from deskpool.starts import store as starts_store

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

#: How many of his latest sessions and failed logons the page shows.
RECENT = 20
#: How many users a search answers at most.
SEARCH_LIMIT = 20


@dataclass(frozen=True, slots=True)
class PoolAnswer:
    """Whether the user can open one pool, and by which entitlement paths."""

    pool_id: uuid.UUID
    pool_name: str
    access: Access
    paths: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class SessionLine:
    """One of his sessions, its pool's name and the logon that opened it."""

    session: SessionRecord
    pool_name: str | None
    logon: LogonRecord | None


@dataclass(frozen=True)
class UserPage:
    """Everything the help desk shows of one user."""

    user: dict[str, Any]
    groups: list[dict[str, str]]
    sessions: list[SessionLine]
    failed_logons: list[tuple[LogonRecord, str | None]]
    desktops: list[tuple[Desktop, str | None]]
    pools: list[PoolAnswer]


async def search_users(runtime: Runtime, text: str) -> list[dict[str, Any]]:
    """Users whose name, email or subject contains ``text``, best matches first."""
    return await store.search_users(runtime.db, text, SEARCH_LIMIT)


def _paths(
    rows: list[store.PoolEntitlementRow], groups: dict[uuid.UUID, tuple[str, str]], manages: bool
) -> dict[uuid.UUID, tuple[str, str, list[Path]]]:
    found: dict[uuid.UUID, tuple[str, str, list[Path]]] = {}
    for row in rows:
        paths = found.setdefault(row.pool_id, (row.pool_name, row.pool_state, []))[2]
        if row.subject_type == "user":
            paths.append(Path("direct"))
        elif row.subject_type == "group" and row.subject_id in groups:
            key, via = groups[row.subject_id]
            kind = "claim" if via == "claim" else "group"
            paths.append(Path(kind, row.subject_id, key))
    if manages:
        for _name, _state, paths in found.values():
            paths.append(Path("permission"))
    return found


async def user_page(runtime: Runtime, user_id: uuid.UUID) -> UserPage:
    """The help desk's page of ``user_id``. :raises NotFound: no such user."""
    async with runtime.db.acquire() as connection:
        user = await identity_store.get_user(connection, user_id)
        if user is None:
            raise NotFound(f"No user has the id {user_id}.")
        group_refs, effective = await resolve_effective(
            connection, str(user_id), user["claimed_groups"], user["claimed_roles"]
        )
        groups = {uuid.UUID(group.id): (group.key, group.via) for group in group_refs}
        rows = await store.pools_with_entitlements(connection, user_id, list(groups))
        by_pool = _paths(rows, groups, has_permission(effective, "pools:manage"))
        pool_ids = list(by_pool)
        counts = await store_pools.pool_counts(connection, pool_ids)
        startable = await starts_store.startable_counts(connection, pool_ids)
        held = [
            desktop
            for desktop in await store_desktops.desktops_held_by(connection, user_id)
            if desktop.state is not DesktopState.DELETING
        ]
        sessions = await session_store.list_sessions(
            connection, limit=RECENT, where=session_store.SessionFilter(user_id=user_id)
        )
        logons = await store.recent_logons(connection, user_id, failed=False, limit=RECENT * 2)
        failed = await store.recent_logons(connection, user_id, failed=True, limit=RECENT)
        names = await store.pool_names(
            connection, {s.pool_id for s in sessions} | {d.pool_id for d in held}
        )
        license = await license_state(connection, runtime.licensing)
    limit = license.judgement.limits.of(Resource.SESSIONS)
    at_limit = limit is not None and license.usage.of(Resource.SESSIONS) >= limit
    held_pools: dict[uuid.UUID, int] = defaultdict(int)
    for desktop in held:
        held_pools[desktop.pool_id] += 1
    answers = [
        PoolAnswer(
            pool_id,
            name,
            judge(
                PoolFacts(
                    user_disabled=bool(user["disabled"]),
                    pool_state=state,
                    paths=tuple(paths),
                    holds_desktop=held_pools[pool_id] > 0,
                    available=counts[pool_id].available,
                    startable=startable.get(pool_id, 0),
                    sessions_at_limit=at_limit,
                )
            ),
            tuple(paths),
        )
        for pool_id, (name, state, paths) in by_pool.items()
    ]
    logon_of_session = {logon.session_id: logon for logon, _ in logons if logon.session_id}
    return UserPage(
        user=user,
        groups=[
            {"id": str(group_id), "key": key, "via": via} for group_id, (key, via) in groups.items()
        ],
        sessions=[
            SessionLine(s, names.get(s.pool_id), logon_of_session.get(s.id)) for s in sessions
        ],
        failed_logons=failed,
        desktops=[(desktop, names.get(desktop.pool_id)) for desktop in held],
        pools=answers,
    )


async def log_off(
    runtime: Runtime, actor: Actor, user_id: uuid.UUID, desktop_id: uuid.UUID
) -> None:
    """Log the user off his desktop now (audited), as when he logs off himself.

    His tunnels close; the pool's rule after a log-off applies (a non-persistent desktop is
    rebuilt).

    :raises NotFound: he holds no such desktop.
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        desktop = await store_desktops.get_desktop(connection, desktop_id, for_update=True)
        if desktop is None or str(desktop.assigned_user) != str(user_id):
            raise NotFound(f"The user holds no desktop with the id {desktop_id}.")
        delivery = await notices.force_logoff(connection, desktop_id, "helpdesk", actor.audit_event)
    await notices.deliver(runtime, delivery)
