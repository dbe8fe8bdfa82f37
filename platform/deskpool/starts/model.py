"""Which desktop is started for a user who opens a pool when none is ready (pure).

The rules follow allocation's (:mod:`deskpool.desktops.allocation`): a persistent pool starts the
user's own desktop; a user without one (or any user of a non-persistent pool) gets a free
powered-off desktop, oldest first. A desktop already on its way to ready for the user (being
started, built or rebuilt) is waited for rather than another started. A disabled pool starts
nothing, and a draining pool starts only what the user holds.

When nothing can be started, an enabled pool may grow for a user who holds none of its
desktops (:func:`may_grow`): a free desktop on its way to ready is reserved to him, else a new
one is built for him, while the pool has fewer than ``max_size`` desktops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from deskpool.desktops.allocation import held_desktops
from deskpool.desktops.states import IN_FLIGHT_STATES
from deskpool.pools.model import Desktop, DesktopState, Pool, PoolState

S = DesktopState


@dataclass(frozen=True, slots=True)
class StartChoice:
    """The desktop a user waits for.

    :ivar desktop: the desktop, as read.
    :ivar power_up: whether it must be powered on now (``powered_off``); else it is already on
        its way to ready for the user.
    :ivar grown: the desktop is being built for the user: the pool grew (or a free desktop on
        its way to ready was reserved to him).
    """

    desktop: Desktop
    power_up: bool
    grown: bool = False


def _offer_order(desktop: Desktop) -> tuple[object, ...]:
    return (desktop.created_at, desktop.name, desktop.id)


def is_free_powered_off(pool: Pool, desktop: Desktop) -> bool:
    """Whether ``desktop`` is a powered-off desktop of ``pool`` that nobody holds."""
    return (
        desktop.pool_id == pool.id
        and desktop.state is S.POWERED_OFF
        and desktop.assigned_user is None
        and not desktop.in_session
    )


def choose_start(
    pool: Pool, desktops: Iterable[Desktop], user: str, *, held_only: bool = False
) -> StartChoice | None:
    """The desktop to start (or wait for) for ``user``, or ``None`` when none can be.

    :param desktops: the pool's desktops the user holds and free powered-off ones (others are
        ignored).
    :param held_only: consider only what the user holds (reconnecting to his own desktop).
    """
    mine = [desktop for desktop in desktops if desktop.pool_id == pool.id]
    if pool.state is PoolState.DISABLED:
        return None
    held = held_desktops(pool, mine, user)
    for desktop in held:
        if desktop.state in IN_FLIGHT_STATES:
            return StartChoice(desktop, power_up=False)
        if desktop.state is S.POWERED_OFF:
            return StartChoice(desktop, power_up=True)
    if held_only or (pool.is_persistent and held) or pool.state is PoolState.DRAINING:
        return None
    free = sorted((d for d in mine if is_free_powered_off(pool, d)), key=_offer_order)
    return StartChoice(free[0], power_up=True) if free else None


def may_grow(pool: Pool, desktops: Iterable[Desktop], user: str) -> bool:
    """Whether an open of ``pool`` by ``user`` may take a desktop being built (or build one).

    Only an enabled pool grows, and only for a user who holds none of its desktops (one he
    holds is what he gets, or waits for); whether it has room is the store's to count.

    :param desktops: the pool's desktops the user holds (others are ignored).
    """
    if pool.state is not PoolState.ENABLED:
        return False
    return not held_desktops(pool, desktops, user)
