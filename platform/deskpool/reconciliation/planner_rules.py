"""The planner's rules of power and health, and what a pass found about each desktop.

Split from :mod:`deskpool.reconciliation.planner` (rules 6 and the health verdict): pure,
like it. :class:`Look` is one desktop as a pass saw it; :func:`power_actions` powers
powered-off desktops on or idle ones off to a schedule phase's targets; :func:`pool_health`
says whether the pool is healthy and, if not, why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from deskpool.config import format_duration
from deskpool.pools.model import Desktop, DesktopState, ObservedVm, Pool, PoolState, PowerState
from deskpool.pools.naming import name_key
from deskpool.reconciliation.plan import (
    HealthStatus,
    PoolHealth,
    PowerOffDesktop,
    PowerUpDesktop,
)
from deskpool.schedules.model import IdlePolicy, Targets

S = DesktopState

#: How many orphan names a health reason lists before it says "and N more".
_NAMES_SHOWN = 5


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def duration(delta: timedelta) -> str:
    return format_duration(delta.total_seconds())


@dataclass(slots=True)
class Look:
    """What one pass found about one desktop."""

    desktop: Desktop
    live: bool
    busy: bool
    stuck: timedelta | None
    vanished: bool


def powered_target(pool: Pool, targets: Targets | None, busy: int) -> int:
    """How many desktops the pool wants powered on (busy ones included)."""
    if targets is None:
        return min(pool.max_size, max(pool.min_size, busy + pool.spare))
    return min(pool.max_size, max(targets.min_ready, busy + targets.spare))


def power_actions(
    pool: Pool,
    looks: Sequence[Look],
    handled: set[UUID],
    deleted: set[UUID],
    wanted: int,
    targets: Targets | None,
    *,
    hold: bool,
    busy: int,
) -> list[PowerUpDesktop | PowerOffDesktop]:
    """Power powered-off desktops up to ``wanted`` powered on, or idle ones off beyond it.

    Desktops handled earlier in the pass (``deleted``, repaired) are left alone, and deleted
    ones are not counted; while a rollout is under way (``hold``) nothing is powered off.
    With ``idle: power_off``, a persistent pool's desktops whose owner has no session are
    powered off whatever the targets (nobody else may use them) and left off: they stay their
    owner's, who powers his own on by opening it (start on connect). They count as busy in
    ``busy`` (the pool's busy desktops), so they are taken out of it.
    """
    present = [look for look in looks if look.live and look.desktop.id not in handled]
    powered = sum(
        1
        for look in looks
        if look.live and look.desktop.state is not S.POWERED_OFF and look.desktop.id not in deleted
    )
    actions: list[PowerUpDesktop | PowerOffDesktop] = []
    if targets is None:  # without a schedule (or draining), nothing stays powered off
        for look in _asleep(present, owned=None):
            actions.append(
                PowerUpDesktop(
                    look.desktop.id, f"{look.desktop.name}: pool {pool.name} has no schedule"
                )
            )
        return actions
    power_off = targets.idle is IdlePolicy.POWER_OFF
    resting_now = power_off and not hold
    owned_idle = [look for look in present if _owned_idle(pool, look)] if resting_now else []
    if power_off:
        # Owned desktops left off (or going off now) are not what the phase's targets count.
        resting = len(owned_idle) + len(_asleep(present, owned=True))
        wanted = powered_target(pool, targets, busy - resting)
        powered -= len(owned_idle)
    why = (
        f"the schedule's phase wants {wanted} desktops powered on in pool {pool.name}; "
        f"{powered} are"
    )
    for look in owned_idle:
        actions.append(
            PowerOffDesktop(
                look.desktop.id,
                f"{look.desktop.name} is assigned to {look.desktop.assigned_user}, who has no "
                "session: the schedule's phase powers idle desktops off (idle: power_off)",
            )
        )
    if powered < wanted:
        asleep = _asleep(present, owned=False if power_off else None)
        for look in asleep[: wanted - powered]:
            actions.append(PowerUpDesktop(look.desktop.id, f"{look.desktop.name}: {why}"))
        return actions
    if hold or not power_off:
        return actions
    idle = sorted(
        (look for look in present if look.desktop.is_available and not look.stuck),
        key=lambda look: name_key(look.desktop.name),
        reverse=True,
    )
    for look in idle[: powered - wanted]:
        actions.append(
            PowerOffDesktop(
                look.desktop.id, f"{look.desktop.name} is free and idle: {why} (idle: power_off)"
            )
        )
    return actions


def _asleep(present: Sequence[Look], *, owned: bool | None) -> list[Look]:
    """Powered-off desktops in name order: owned ones only, free ones only, or all (``None``)."""
    return sorted(
        (
            look
            for look in present
            if look.desktop.state is S.POWERED_OFF
            and (owned is None or (look.desktop.assigned_user is not None) is owned)
        ),
        key=lambda look: name_key(look.desktop.name),
    )


def _owned_idle(pool: Pool, look: Look) -> bool:
    """A persistent pool's ready desktop whose owner has no session (it may be powered off)."""
    desktop = look.desktop
    return (
        pool.is_persistent
        and desktop.assigned_user is not None
        and desktop.state is S.READY
        and not desktop.in_session
        and not look.stuck
    )


#: States of a free desktop on its way to be handed out: being built or refreshed, or powered
#: off (a user's open starts it for him).
_ON_ITS_WAY = frozenset(
    {
        S.PROVISIONING,
        S.STARTING,
        S.WAITING_FOR_AGENT,
        S.WAITING_FOR_WINDOWS,
        S.REFRESHING,
        S.POWERED_OFF,
        S.READY,  # used since its refresh: it is refreshed
    }
)
#: Power states in which nobody can connect to a VM.
_DARK = frozenset({PowerState.STOPPED, PowerState.PAUSED})


def serving_problems(
    pool: Pool,
    looks: Sequence[Look],
    vms: Mapping[str, ObservedVm],
    live: int,
    creating: bool,
    targets: Targets | None,
) -> list[str]:
    """Why users of an enabled pool get no desktop, if they do not (issue 37).

    A desktop a user holds whose VM is stopped strands him (he cannot connect); a pool with
    nothing free, nothing on its way and no room to grow (at ``max_size``) gives a new user
    nothing. Below ``max_size`` his open builds him a desktop (``sessions.growth``), even with
    ``spare`` 0: that pool serves him. What the ``max_size`` rule of :func:`pool_health`
    already says is not repeated.
    """
    problems = []
    for look in looks:
        desktop = look.desktop
        vm = vms.get(desktop.vm_id) if desktop.vm_id is not None else None
        held = desktop.state is S.IN_USE or (desktop.state is S.READY and desktop.is_busy)
        if held and vm is not None and vm.power_state in _DARK:
            state = str(desktop.state).replace("_", " ")
            problems.append(
                f"{desktop.name} is {state} but its VM is {vm.power_state}: its user cannot "
                "connect to it"
            )
    if pool.state is not PoolState.ENABLED or creating:
        return problems
    for look in looks:
        desktop = look.desktop
        if not look.live or look.stuck or look.vanished or desktop.is_busy:
            continue
        if desktop.is_available or desktop.state in _ON_ITS_WAY:
            return problems
    # Below max_size a new user's open builds him one (sessions.growth): he waits, but is
    # served. At max_size with spare 0 nobody gets one (with spare, pool_health says so).
    spare = pool.spare if targets is None else targets.spare
    if live >= pool.max_size and spare == 0:
        problems.append(
            f"no desktop for a new user: every desktop ({live}) is held and the pool is at "
            f"max_size ({pool.max_size})"
        )
    return problems


def pool_health(
    pool: Pool,
    looks: Sequence[Look],
    orphans: Sequence[ObservedVm],
    observed: bool,
    live: int,
    naming_problem: str | None,
    serving: Sequence[str] = (),
) -> PoolHealth:
    """Say whether the pool is healthy and, if not, why.

    :param serving: why users of the pool get no desktop (:func:`serving_problems`).
    """
    reasons: list[str] = []
    failures: Counter[tuple[str, str]] = Counter()
    stuck: Counter[tuple[str, str]] = Counter()
    vanished = usable = available = 0
    for look in looks:
        desktop = look.desktop
        if desktop.state is S.FAILED:
            failures[(str(desktop.failed_step or "an unknown step"), desktop.last_error or "")] += 1
        if look.stuck is not None:
            stuck[(str(desktop.state), duration(look.stuck))] += 1
        if look.vanished:
            vanished += 1
        elif desktop.state in (S.READY, S.IN_USE):
            usable += 1
            available += desktop.is_available
    if not observed:
        reasons.append("the cluster's VMs could not be listed; only timeouts are acted on")
    for (step, error), count in sorted(failures.items(), key=lambda item: (-item[1], item[0])):
        why = f": {error}" if error else ""
        reasons.append(f"{plural(count, 'desktop')} failed at {step}{why}")
    for (state, limit), count in sorted(stuck.items(), key=lambda item: (-item[1], item[0])):
        reasons.append(f"{plural(count, 'desktop')} stuck in {state} for over {limit}")
    if vanished:
        whose = "its VM" if vanished == 1 else "their VMs"
        reasons.append(f"{plural(vanished, 'desktop')} lost {whose} on the cluster")
    if orphans:
        names = ", ".join(vm.name for vm in orphans[:_NAMES_SHOWN])
        more = f" and {len(orphans) - _NAMES_SHOWN} more" if len(orphans) > _NAMES_SHOWN else ""
        verb = "belongs" if len(orphans) == 1 else "belong"
        reasons.append(
            f"{plural(len(orphans), 'VM')} tagged for this pool {verb} to no desktop: {names}{more}"
        )
    if naming_problem:
        reasons.append(naming_problem)
    reasons.extend(serving)
    if (
        pool.state is PoolState.ENABLED
        and pool.spare > 0
        and live >= pool.max_size
        and available < pool.spare
    ):
        reasons.append(
            f"at max_size ({pool.max_size}): {available} of {pool.spare} spare desktops available"
        )
    if not reasons:
        return PoolHealth(HealthStatus.HEALTHY)
    broken = failures or stuck or vanished
    status = HealthStatus.FAILING if broken and not usable else HealthStatus.DEGRADED
    return PoolHealth(status, tuple(reasons))
