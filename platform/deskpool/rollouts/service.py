"""The rollout use cases: start, list, show, pause, resume, cancel, and the image history.

Each change validates, writes, audits and enqueues the pool's reconciliation in one
transaction; the worker's reconciliation then carries the rollout on
(:mod:`deskpool.rollouts.planner`, :mod:`deskpool.reconciliation.rollout_apply`). Live events are
published
after the commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from deskpool.actor import Actor
from deskpool.desktops.store import desktops_of_pools
from deskpool.errors import NotFound, ValidationFailed
from deskpool.live.publishers import publish
from deskpool.notices import service as notices
from deskpool.notices.service import deliver
from deskpool.pools import lookups as pools
from deskpool.pools import store as store_pools
from deskpool.pools.jobs import enqueue_pool_reconcile
from deskpool.rollouts import model, store
from deskpool.rollouts.changes import change_state, notice_source, rollout_event
from deskpool.rollouts.model import (
    Rollout,
    RolloutCounts,
    RolloutDesktop,
    RolloutState,
    StartRollout,
)
from deskpool.rollouts.planner import RolloutView, count_rollout, waiting_for
from deskpool.rollouts.store import PoolImage

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@dataclass(frozen=True)
class RolloutShown:
    """A rollout with its per-desktop entries and how far it is."""

    rollout: Rollout
    desktops: list[RolloutDesktop]
    counts: RolloutCounts
    #: What it waits for now (:func:`~deskpool.rollouts.planner.waiting_for`).
    waiting_for: str | None = None


async def _shown_many(
    runtime: Runtime, pool_id: uuid.UUID, rollouts: list[Rollout]
) -> list[RolloutShown]:
    """Rollouts of one pool with their entries and counts (a few queries for any number)."""
    if not rollouts:
        return []
    entries = await store.entries_of(runtime.db, [rollout.id for rollout in rollouts])
    record = await store_pools.get_pool_record(runtime.db, pool_id)
    if record is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    desktops = (await desktops_of_pools(runtime.db, [pool_id])).get(pool_id, [])
    shown = []
    for rollout in rollouts:
        mine = entries.get(rollout.id, [])
        view = RolloutView(rollout, {entry.desktop_id: entry for entry in mine})
        counts = count_rollout(record.pool, desktops, view)
        waits = waiting_for(record.pool, desktops, view)
        shown.append(RolloutShown(rollout, mine, counts, waits))
    return shown


async def _shown(runtime: Runtime, rollout: Rollout) -> RolloutShown:
    return (await _shown_many(runtime, rollout.pool_id, [rollout]))[0]


async def start_rollout(
    runtime: Runtime, actor: Actor, pool_id: uuid.UUID, command: StartRollout
) -> RolloutShown:
    """Start a rollout of the pool to ``command.template`` with the command's strategy.

    The template is looked up on the pool's cluster as a pool's is (a unique name is stored as
    its id). :raises NotFound: no such pool. :raises ValidationFailed: an invalid strategy or
    template. :raises RolloutConflict: the pool already has an active rollout.
    """
    record = await pools.get_pool(runtime, pool_id)
    strategy = command.strategy
    template = command.template
    errors = model.validate_strategy(strategy, record.pool, template)
    if errors:
        raise ValidationFailed(errors)
    cluster = await pools.cluster_of(runtime, record.pool.cluster_id)
    check = await pools.check_template(
        runtime, cluster, template, record.pool.os_type, os_pointer="/template"
    )
    template = check.template
    async with runtime.db.acquire() as connection, connection.transaction():
        current = await store_pools.get_pool_record(connection, pool_id, for_update=True)
        if current is None:
            raise NotFound(f"No pool has the id {pool_id}.")
        errors = model.validate_strategy(strategy, current.pool, template)
        if errors:
            raise ValidationFailed(errors)
        now: datetime = await connection.fetchval("SELECT now()")
        rollout = await store.insert_rollout(
            connection,
            model.new_rollout(
                rollout_id=uuid.uuid4(),
                pool=current.pool,
                to_template=template,
                strategy=strategy,
                created_by=actor.name,
                now=now,
            ),
        )
        await enqueue_pool_reconcile(connection, pool_id)
        await actor.record(
            connection,
            "rollout.create",
            "pools",
            str(pool_id),
            {
                "rollout_id": str(rollout.id),
                "from_template": rollout.from_template,
                "to_template": rollout.to_template,
                "canary": rollout.canary,
                "batch_size": rollout.batch_size,
                "min_ready": rollout.min_ready,
                "surge": rollout.surge,
                "in_use": str(rollout.in_use),
                "warning_seconds": rollout.warning_seconds,
                "start_at": rollout.start_at.isoformat(),
                "stop_on_error": rollout.stop_on_error,
                "recreate_assigned": rollout.recreate_assigned,
                "template_check": check.status,
            },
        )
    await publish(runtime, rollout_event(rollout))
    return await _shown(runtime, rollout)


async def list_rollouts(
    runtime: Runtime,
    pool_id: uuid.UUID,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> list[RolloutShown]:
    """The pool's rollouts, newest first (404 when there is no such pool)."""
    await pools.get_pool(runtime, pool_id)
    rollouts = await store.list_rollouts(runtime.db, pool_id, limit=limit, after=after)
    return await _shown_many(runtime, pool_id, rollouts)


async def get_rollout(runtime: Runtime, pool_id: uuid.UUID, rollout_id: uuid.UUID) -> RolloutShown:
    """One rollout of the pool; :raises NotFound: no such pool or rollout."""
    rollout = await store.get_rollout(runtime.db, pool_id, rollout_id)
    if rollout is None:
        raise NotFound(f"Pool {pool_id} has no rollout with the id {rollout_id}.")
    return await _shown(runtime, rollout)


async def _change(
    runtime: Runtime,
    actor: Actor,
    pool_id: uuid.UUID,
    rollout_id: uuid.UUID,
    verb: str,
) -> RolloutShown:
    async with runtime.db.acquire() as connection, connection.transaction():
        rollout = await store.get_rollout(connection, pool_id, rollout_id, for_update=True)
        if rollout is None:
            raise NotFound(f"Pool {pool_id} has no rollout with the id {rollout_id}.")
        now: datetime = await connection.fetchval("SELECT now()")
        if verb == "pause":
            after = model.pause(rollout, now)
        elif verb == "resume":
            after = model.resume(rollout, now)
        else:
            after = replace(model.cancel(rollout, now), reason=f"cancelled by {actor.name}")
        serving = model.serving_template(after)
        delivery = await change_state(
            connection, rollout, after, serving, actor=actor.name, now=now
        )
        if after.state is RolloutState.PAUSED:
            # Nobody is logged off while it is paused: the warnings are withdrawn, and given
            # afresh (the whole warning_seconds) when it resumes.
            await store.withdraw_warnings(connection, rollout_id)
            delivery.extend(await notices.clear(connection, source=notice_source(rollout_id)))
        await enqueue_pool_reconcile(connection, pool_id)
        await actor.record(
            connection,
            f"rollout.{verb}",
            "pools",
            str(pool_id),
            {"rollout_id": str(rollout_id), "from": str(rollout.state), "to": str(after.state)},
        )
    await deliver(runtime, delivery)
    return await get_rollout(runtime, pool_id, rollout_id)


async def pause_rollout(
    runtime: Runtime, actor: Actor, pool_id: uuid.UUID, rollout_id: uuid.UUID
) -> RolloutShown:
    """Pause a scheduled, canary or rolling rollout: nothing new is replaced until resumed."""
    return await _change(runtime, actor, pool_id, rollout_id, "pause")


async def resume_rollout(
    runtime: Runtime, actor: Actor, pool_id: uuid.UUID, rollout_id: uuid.UUID
) -> RolloutShown:
    """Resume a paused rollout where it was paused."""
    return await _change(runtime, actor, pool_id, rollout_id, "resume")


async def cancel_rollout(
    runtime: Runtime, actor: Actor, pool_id: uuid.UUID, rollout_id: uuid.UUID
) -> RolloutShown:
    """Cancel an active rollout: nothing more is replaced; desktops on the new template stay.

    The pool clones the template it had before the rollout again.
    """
    return await _change(runtime, actor, pool_id, rollout_id, "cancel")


async def image_history(runtime: Runtime, pool_id: uuid.UUID, *, limit: int) -> list[PoolImage]:
    """Every template the pool has run, newest first (404 when there is no such pool)."""
    await pools.get_pool(runtime, pool_id)
    return await store.list_images(runtime.db, pool_id, limit=limit)


def rollout_states() -> list[str]:
    """Every rollout state, for the API document."""
    return [str(state) for state in RolloutState]
