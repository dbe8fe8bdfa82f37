"""A rollout's change of state, as its service and the reconciliation both record it.

:func:`change_state` saves the rollout's new state, makes the pool clone the template it now
serves (asking for a reconciliation), clears its notices once it has ended, audits the change
and returns the live events to send after the commit. The administrator's use cases
(:mod:`deskpool.rollouts.service`) and the reconciliation's apply
(:mod:`deskpool.reconciliation.rollout_apply`) both call it, so it lives here, below
reconciliation in the layer order (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import asyncpg

from deskpool.audit import record_audit_event
from deskpool.events import AuditEvent
from deskpool.live.model import LiveEvent
from deskpool.notices import service as notices
from deskpool.notices.service import Delivery
from deskpool.pools.jobs import enqueue_pool_reconcile
from deskpool.rollouts import store
from deskpool.rollouts.model import ENDED, Rollout, RolloutCounts, RolloutState

#: The reason code of a rollout's notices.
NOTICE_REASON = "image_rollout"


def notice_source(rollout_id: object) -> str:
    """The ``source`` of a rollout's notices."""
    return f"rollout:{rollout_id}"


def progress_of(counts: RolloutCounts) -> dict[str, int]:
    """A rollout's progress as live events carry it (its counts and percent)."""
    return {
        "total": counts.total,
        "on_new_template": counts.on_new_template,
        "replacing": counts.replacing,
        "waiting_for_logoff": counts.waiting_for_logoff,
        "failed": counts.failed,
        "percent": counts.percent,
    }


def rollout_event(rollout: Rollout, extra: dict[str, Any] | None = None) -> LiveEvent:
    """``pool.rollout``: a rollout's state (pools:read sees it)."""
    return LiveEvent(
        "pool.rollout",
        str(rollout.pool_id),
        {
            "rollout_id": str(rollout.id),
            "state": str(rollout.state),
            "reason": rollout.reason,
            "to_template": rollout.to_template,
            **(extra or {}),
        },
    )


async def change_state(
    connection: asyncpg.Connection,
    rollout: Rollout,
    after: Rollout,
    serving_template: str,
    *,
    actor: str,
    now: datetime,
    counts: RolloutCounts | None = None,
) -> Delivery:
    """Record ``after`` (from ``rollout``), make the pool clone ``serving_template``."""
    if rollout.state is RolloutState.SCHEDULED and after.state is not RolloutState.SCHEDULED:
        after = replace(after, started_at=after.started_at or now)
    saved = await store.save_state(connection, after)
    progress = None if counts is None else {"progress": progress_of(counts)}
    delivery = Delivery(events=[rollout_event(saved, progress)])
    if await store.set_pool_template(connection, rollout.pool_id, serving_template):
        how = "rollout" if serving_template == rollout.to_template else "reverted"
        await store.record_image(
            connection,
            rollout.pool_id,
            serving_template,
            set_by=actor,
            how=how,
            rollout_id=rollout.id,
        )
        await enqueue_pool_reconcile(connection, rollout.pool_id)
    if saved.state in ENDED:
        delivery.extend(await notices.clear(connection, source=notice_source(rollout.id)))
    await record_audit_event(
        connection,
        AuditEvent(
            action=f"rollout.{saved.state}",
            actor=actor,
            resource_type="pools",
            resource_id=str(rollout.pool_id),
            outcome="success",
            occurred_at=now,
            details={
                "rollout_id": str(rollout.id),
                "from": str(rollout.state),
                "reason": saved.reason,
                "template": serving_template,
            },
        ),
    )
    return delivery
