"""Which desktop a user gets when they open a pool.

- A *persistent* pool gives a user the desktop assigned to them, every time. A user without
  one is assigned a free, ready, clean desktop (one nobody used since it was last built).
- A *non-persistent* pool gives back the desktop the user is already using (a reconnect);
  otherwise it lends a free, ready, clean desktop, which is rebuilt after logoff.
- A disabled pool gives out nothing; a draining pool only gives users back what they hold.

Free desktops are offered oldest first (then by name and id), the opposite of the order in
which reconciliation removes surplus desktops (newest first), so a pool that shrinks does not
delete the desktop it just handed out. The order is deterministic; a repository implements it
as ``ORDER BY created_at, name, id`` with ``FOR UPDATE SKIP LOCKED``, trying the candidates of
:func:`allocation_candidates` in turn, so that two requests never get the same desktop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from deskpool.desktops.states import Allocated
from deskpool.errors import Conflict, ServiceUnavailable
from deskpool.pools.model import Desktop, DesktopState, Pool, PoolState

S = DesktopState


class PoolUnavailable(Conflict):
    """The pool is disabled, or draining and the user holds no desktop in it (HTTP 409)."""

    code = "pool_unavailable"
    title = "Pool unavailable"


class NoDesktopAvailable(ServiceUnavailable):
    """No free desktop is ready; more are being provisioned or the pool is full (HTTP 503)."""

    code = "no_desktop_available"
    title = "No desktop available"


class DesktopNotReady(ServiceUnavailable):
    """The user's own desktop exists but is not ready yet (being built, refreshed or failed)."""

    code = "desktop_not_ready"
    title = "Desktop not ready"


@dataclass(frozen=True, slots=True)
class Allocation:
    """The desktop chosen for a user.

    :ivar desktop: the desktop record as it was read (the allocation is not applied yet).
    :ivar user: the user it goes to.
    :ivar new_assignment: whether the desktop is handed to the user for the first time (the
        repository must lock it as a free desktop), rather than given back to its holder.
    """

    desktop: Desktop
    user: str
    new_assignment: bool

    @property
    def event(self) -> Allocated:
        """The event that records the allocation (see :mod:`deskpool.desktops.states`)."""
        return Allocated(self.user)


def _offer_order(desktop: Desktop) -> tuple[object, ...]:
    return (desktop.created_at, desktop.name, desktop.id)


def _held_order(desktop: Desktop) -> tuple[object, ...]:
    """A user's own desktops: the one in use first, then a ready one, then the oldest."""
    rank = {S.IN_USE: 0, S.READY: 1}.get(desktop.state, 2)
    return (rank, *_offer_order(desktop))


def held_desktops(pool: Pool, desktops: Iterable[Desktop], user: str) -> list[Desktop]:
    """Return the desktops of ``pool`` that ``user`` holds, the one to give back first."""
    held = [
        desktop
        for desktop in desktops
        if desktop.pool_id == pool.id
        and desktop.assigned_user == user
        and desktop.state is not S.DELETING
    ]
    return sorted(held, key=_held_order)


def free_desktops(pool: Pool, desktops: Iterable[Desktop]) -> list[Desktop]:
    """Return the desktops of ``pool`` that can be handed to a new user, in offer order."""
    free = [desktop for desktop in desktops if desktop.pool_id == pool.id and desktop.is_available]
    return sorted(free, key=_offer_order)


def allocation_candidates(
    pool: Pool, desktops: Iterable[Desktop], user: str
) -> tuple[list[Desktop], bool]:
    """Return the desktops ``user`` may get, in order, and whether they are new assignments.

    The list is empty when the user gets nothing; :func:`choose_desktop` says why.
    """
    mine = [desktop for desktop in desktops if desktop.pool_id == pool.id]
    if pool.state is PoolState.DISABLED:
        return [], False
    held = held_desktops(pool, mine, user)
    usable = [desktop for desktop in held if desktop.state in (S.READY, S.IN_USE)]
    if pool.is_persistent and held:
        return usable[:1], False
    if not pool.is_persistent:
        in_use = [desktop for desktop in usable if desktop.state is S.IN_USE]
        if in_use:
            return in_use[:1], False
    if pool.state is PoolState.DRAINING:
        return [], False
    return free_desktops(pool, mine), True


def choose_desktop(pool: Pool, desktops: Iterable[Desktop], user: str) -> Allocation:
    """Return the desktop ``user`` gets in ``pool`` (the first candidate).

    :raises PoolUnavailable: when the pool is disabled, or draining and the user holds nothing.
    :raises DesktopNotReady: when the user's desktop in a persistent pool is not ready.
    :raises NoDesktopAvailable: when no free desktop is ready.
    """
    mine = [desktop for desktop in desktops if desktop.pool_id == pool.id]
    if pool.state is PoolState.DISABLED:
        raise PoolUnavailable(f"pool {pool.name} is disabled")
    candidates, new_assignment = allocation_candidates(pool, mine, user)
    if candidates:
        return Allocation(candidates[0], user, new_assignment)
    if pool.is_persistent:
        held = held_desktops(pool, mine, user)
        if held:
            raise DesktopNotReady(
                f"your desktop {held[0].name} is {held[0].state}; try again when it is ready"
            )
    if pool.state is PoolState.DRAINING:
        raise PoolUnavailable(f"pool {pool.name} is draining and gives out no new desktops")
    raise NoDesktopAvailable(f"pool {pool.name} has no free desktop ready; try again shortly")
