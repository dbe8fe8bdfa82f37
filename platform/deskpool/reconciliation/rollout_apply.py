"""Applying a rollout's part of a reconciliation plan, in the reconciliation's transaction.

The reconciliation service (:mod:`deskpool.reconciliation.reconciler`) calls
:func:`apply_rollout_action`
for each action of :attr:`~deskpool.reconciliation.plan.PoolPlan.rollout`, each in a savepoint of
its
fenced transaction (so a worker that lost its lease changes nothing, and a worker killed
mid-rollout leaves the rollout exactly where its last committed pass left it). Every action is
audited (actor ``system:reconciler``); what must be sent after the commit (the rollout's and
the users' live events, the gateways' disconnects) is added to the returned
:class:`~deskpool.notices.service.Delivery`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.actor import Actor
from deskpool.audit import record_audit_event
from deskpool.desktops.jobs import enqueue_desktop_job, job_for_state
from deskpool.desktops.states import Refresh
from deskpool.desktops.store import apply_event_if_unchanged, get_desktop
from deskpool.live.publishers import desktop_event
from deskpool.notices import service as notices
from deskpool.notices.service import Delivery
from deskpool.pools.model import Desktop, Pool
from deskpool.rollouts import store
from deskpool.rollouts.changes import (
    NOTICE_REASON,
    change_state,
    notice_source,
    progress_of,
    rollout_event,
)
from deskpool.rollouts.model import (
    ENDED,
    EntryState,
    RolloutDesktop,
    finish,
)
from deskpool.rollouts.plan import (
    ChangeRollout,
    ForceLogoff,
    ReplaceForRollout,
    RolloutAction,
    RolloutPlan,
    SettleEntry,
    WaitForLogoff,
    WarnUser,
)
from deskpool.rollouts.planner import RolloutView

#: Who rollouts act as in the audit trail.
ACTOR = "system:reconciler"

#: The audit events of what the reconciler does for a rollout.
_audit = Actor.system(ACTOR).audit_event


async def _unchanged(
    connection: asyncpg.Connection, view: RolloutView, desktop_id: Any, desktop: Desktop | None
) -> bool:
    """Whether the desktop's entry (and the desktop) are as the plan saw them; locks both."""
    planned = view.entries.get(desktop_id)
    current = await store.get_entry(connection, view.rollout.id, desktop_id, for_update=True)
    if (None if planned is None else planned.state) != (None if current is None else current.state):
        return False
    if desktop is None:
        return True
    return await get_desktop(connection, desktop.id, for_update=True) == desktop


async def apply_rollout_action(
    connection: asyncpg.Connection,
    pool: Pool,
    part: RolloutPlan,
    view: RolloutView,
    desktops: dict[Any, Desktop],
    action: RolloutAction,
    now: datetime,
) -> Delivery | None:
    """Apply one rollout action; ``None`` when it is left to the next pass.

    That is when the rollout, the desktop's entry or the desktop moved on since the plan
    (another pass acted first, a user logged off...).
    """
    rollout = view.rollout
    details: dict[str, Any] = {
        "reason": action.reason,
        "rollout_id": str(rollout.id),
        "pool_id": str(pool.id),
    }
    delivery = Delivery()
    if isinstance(action, ChangeRollout):
        current = await store.get_rollout(connection, pool.id, rollout.id, for_update=True)
        if current is None or current.state is not rollout.state:
            return None  # paused, resumed or cancelled since the plan
        if action.state in ENDED:
            after = finish(current, action.state, action.reason, now)
        else:
            after = replace(current, state=action.state, reason=action.reason)
        return await change_state(
            connection,
            current,
            after,
            action.serving_template,
            actor=ACTOR,
            now=now,
            counts=part.counts,
        )
    current = await store.active_rollout(connection, pool.id, for_update=True)
    if current is None or current.id != rollout.id or current.state is not rollout.state:
        return None
    desktop = desktops.get(action.desktop_id)
    if not await _unchanged(
        connection, view, action.desktop_id, None if isinstance(action, SettleEntry) else desktop
    ):
        return None
    if isinstance(action, SettleEntry):
        await store.save_entry(
            connection,
            RolloutDesktop(
                rollout_id=rollout.id,
                desktop_id=action.desktop_id,
                desktop_name=action.desktop_name,
                role=action.role,
                state=action.state,
                updated_at=now,
                error=action.error,
            ),
        )
        if action.state in (EntryState.REPLACED, EntryState.FAILED, EntryState.REPLACING):
            delivery.extend(
                await notices.clear(
                    connection, source=notice_source(rollout.id), desktop_id=action.desktop_id
                )
            )
        details["state"] = str(action.state)
        await record_audit_event(
            connection,
            _audit(f"rollout.{action.kind}", "desktops", str(action.desktop_id), details),
        )
        delivery.events.append(
            rollout_event(
                current,
                {
                    "desktop_id": str(action.desktop_id),
                    "desktop": action.desktop_name,
                    "desktop_state": str(action.state),
                    "progress": progress_of(part.counts),
                },
            )
        )
        return delivery
    if desktop is None:
        return None
    entry_state: EntryState
    warned_at = logoff_at = None
    role = getattr(action, "role", None)
    if isinstance(action, ReplaceForRollout):
        rebuilt = await apply_event_if_unchanged(connection, desktop, Refresh(), now, pool=pool)
        if rebuilt is None:
            return None
        kind = job_for_state(rebuilt)
        if kind is not None:
            job = await enqueue_desktop_job(connection, kind, rebuilt)
            details["job_id"] = job.id
        entry_state = EntryState.REPLACING
        delivery.events.append(desktop_event(rebuilt))
    elif isinstance(action, WaitForLogoff):
        entry_state = EntryState.WAITING_FOR_LOGOFF
    elif isinstance(action, WarnUser):
        entry_state = EntryState.WARNED
        warned_at, logoff_at = now, action.ends_at
        _, warned = await notices.warn(
            connection,
            desktop_id=desktop.id,
            pool_id=pool.id,
            user_id=action.user,
            ends_at=action.ends_at,
            reason=NOTICE_REASON,
            message=action.message,
            source=notice_source(rollout.id),
            audit=_audit,
        )
        delivery.extend(warned)
        details["ends_at"] = action.ends_at.isoformat()
    elif isinstance(action, ForceLogoff):
        delivery.extend(await notices.force_logoff(connection, desktop.id, action.reason, _audit))
        await record_audit_event(
            connection, _audit(f"rollout.{action.kind}", "desktops", str(desktop.id), details)
        )
        return delivery
    else:
        raise ValueError(f"a rollout cannot apply {action!r}")
    if role is not None:
        await store.save_entry(
            connection,
            RolloutDesktop(
                rollout_id=rollout.id,
                desktop_id=desktop.id,
                desktop_name=desktop.name,
                role=role,
                state=entry_state,
                updated_at=now,
                warned_at=warned_at,
                logoff_at=logoff_at,
            ),
        )
    details["desktop"] = desktop.name
    await record_audit_event(
        connection, _audit(f"rollout.{action.kind}", "desktops", str(desktop.id), details)
    )
    delivery.events.append(
        rollout_event(
            current,
            {
                "desktop_id": str(desktop.id),
                "desktop": desktop.name,
                "desktop_state": str(entry_state),
                "progress": progress_of(part.counts),
            },
        )
    )
    return delivery
