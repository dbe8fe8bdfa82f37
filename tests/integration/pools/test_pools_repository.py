"""The pool repository against PostgreSQL: mapping, generations, desktops, allocation."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import asyncpg
import pytest
from tests.support.pools import (
    MakePool,
    add_desktops,
    add_user,
    pool_model,
)

from deskpool.desktops import store as store_desktops
from deskpool.desktops import store_allocation
from deskpool.desktops.allocation import DesktopNotReady, NoDesktopAvailable, PoolUnavailable
from deskpool.desktops.states import Cloned, Delete, IllegalTransition, Started
from deskpool.errors import ValidationFailed
from deskpool.pools import errors, store_entitlements
from deskpool.pools import store as store_pools
from deskpool.pools.model import (
    DesktopState,
    HealthStatus,
    ObservedVm,
    PoolHealth,
    PoolKind,
    PoolState,
    PowerState,
)
from deskpool.reconciliation import store as store_reconcile
from deskpool.reconciliation import store_orphans

S = DesktopState


async def test_a_pool_reads_back_as_it_was_written(
    db: asyncpg.Connection, cluster_id: uuid.UUID
) -> None:
    pool = pool_model(cluster_id, target_nodes=("pve1", "pve2"), storage="fast", spare=2)
    join = store_pools.DomainJoin("corp.example", "joiner", "OU=Desktops")
    record = await store_pools.create_pool(db, pool, description="lab", domain_join=join)
    assert record.pool == pool
    assert record.description == "lab"
    assert record.domain_join == join
    assert record.health is None
    assert record.reconciled_at is None
    assert not record.domain_join_password.is_set
    assert await store_pools.get_pool(db, pool.id) == pool


async def test_pool_names_are_unique_without_case(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    with pytest.raises(errors.PoolNameTaken):
        await store_pools.create_pool(db, pool_model(pool.cluster_id, name=pool.name.upper()))


async def test_an_unknown_cluster_is_a_field_error(db: asyncpg.Connection) -> None:
    with pytest.raises(ValidationFailed) as caught:
        await store_pools.create_pool(db, pool_model(uuid.uuid4()))
    assert caught.value.errors[0].pointer == "/cluster_id"


async def test_update_bumps_the_generation_only_for_reconcile_settings(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    renamed = await store_pools.update_pool(db, pool, replace(pool, name=pool.name + "-x"))
    assert renamed.pool.generation == pool.generation
    resized = await store_pools.update_pool(
        db, renamed.pool, replace(renamed.pool, max_size=5), description="smaller"
    )
    assert resized.pool.generation == pool.generation + 1
    assert resized.pool.max_size == 5
    assert resized.description == "smaller"
    drained = await store_pools.set_pool_state(db, pool.id, PoolState.DRAINING)
    assert drained is not None
    assert drained.generation == pool.generation + 2


async def test_delete_refuses_a_pool_with_desktops(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    (desktop_id,) = await add_desktops(db, pool, 1)
    with pytest.raises(errors.PoolNotEmpty):
        await store_pools.delete_pool(db, pool.id)
    await store_desktops.apply_event(db, desktop_id, Delete())
    assert await store_desktops.remove_desktop(db, desktop_id)
    assert await store_pools.delete_pool(db, pool.id)
    assert not await store_pools.delete_pool(db, pool.id)


async def test_counts_and_listing(db: asyncpg.Connection, make_pool: MakePool) -> None:
    pool, empty = await make_pool(), await make_pool()
    await add_desktops(db, pool, 3)
    await add_desktops(db, pool, 2, S.PROVISIONING)
    counts = await store_pools.pool_counts(db, [pool.id, empty.id])
    assert counts[pool.id].total == 5
    assert counts[pool.id].by_state[S.READY] == 3
    assert counts[pool.id].available == 3
    assert counts[empty.id].total == 0
    first = await store_desktops.list_desktops(db, limit=3, pool_id=pool.id)
    last_name, last_id = store_desktops.desktop_cursor(first[-1].desktop)
    rest = await store_desktops.list_desktops(
        db, limit=10, pool_id=pool.id, after=(last_name, last_id)
    )
    assert len(first) == 3
    assert len(rest) == 2
    ready = await store_desktops.list_desktops(db, limit=10, pool_id=pool.id, state=S.PROVISIONING)
    assert len(ready) == 2
    by_pool = await store_reconcile.desktops_of_pools(db, [pool.id, empty.id])
    assert len(by_pool[pool.id]) == 5
    assert by_pool[empty.id] == []


async def test_apply_event_writes_the_transition_and_refuses_illegal_ones(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    (desktop,) = await store_desktops.insert_desktops(db, pool, [f"x{uuid.uuid4().hex[:8]}"])
    assert desktop.state is S.PROVISIONING
    now = datetime.now(UTC)
    cloned = await store_desktops.apply_event(db, desktop.id, Cloned("vm-1", "tpl"), now)
    assert (cloned.state, cloned.vm_id, cloned.state_changed_at) == (S.STARTING, "vm-1", now)
    with pytest.raises(IllegalTransition):
        await store_desktops.apply_event(db, desktop.id, Cloned("vm-2", "tpl"))
    started = await store_desktops.apply_event(db, desktop.id, Started())
    assert started.state is S.WAITING_FOR_AGENT
    assert await store_desktops.get_desktop(db, desktop.id) == started


async def test_desktop_names_are_unique_on_a_cluster(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool, other = await make_pool(), await make_pool()
    name = f"n{uuid.uuid4().hex[:8]}"
    await store_desktops.insert_desktops(db, pool, [name])
    with pytest.raises(errors.DesktopNameTaken):
        await store_desktops.insert_desktops(db, other, [name.upper()])
    names = await store_reconcile.desktop_names_on_clusters(db, [pool.cluster_id])
    assert names[pool.cluster_id] == {name}


async def test_reconcile_bookkeeping(db: asyncpg.Connection, make_pool: MakePool) -> None:
    pool = await make_pool()
    queue = await store_reconcile.pools_to_reconcile(db, 100_000)
    assert pool.id in {p.id for p in queue}
    health = PoolHealth(HealthStatus.DEGRADED, ("1 desktop failed",))
    assert await store_reconcile.mark_reconciled(db, pool.id, pool.generation + 5, health)
    record = await store_pools.get_pool_record(db, pool.id)
    assert record is not None
    assert record.pool.reconciled_generation == pool.generation  # never beyond generation
    assert record.health == health
    assert record.reconciled_at is not None
    assert not await store_reconcile.mark_reconciled(db, uuid.uuid4(), 1, health)


async def test_orphans_are_recorded_once(db: asyncpg.Connection, make_pool: MakePool) -> None:
    pool = await make_pool()
    vm = ObservedVm(vm_id="901", name="stray", power_state=PowerState.RUNNING, pool_id=pool.id)
    first = await store_orphans.record_orphans(db, pool.cluster_id, [vm])
    again = await store_orphans.record_orphans(db, pool.cluster_id, [vm])
    assert [o.vm_id for o in first] == ["901"]
    assert again == []
    assert await store_orphans.known_orphan_ids(db, [pool.cluster_id]) == {"901"}
    assert [o.name for o in await store_orphans.list_orphans(db, pool_id=pool.id)] == ["stray"]
    assert await store_orphans.forget_orphans(db, pool.cluster_id, ["901"]) == 1


async def test_entitlements(db: asyncpg.Connection, make_pool: MakePool) -> None:
    pool, other = await make_pool(), await make_pool()
    user, group = await add_user(db), uuid.uuid4()
    U, G = store_entitlements.SubjectType.USER, store_entitlements.SubjectType.GROUP
    _, created = await store_entitlements.grant_entitlement(db, pool.id, U, uuid.UUID(user))
    _, again = await store_entitlements.grant_entitlement(db, pool.id, U, uuid.UUID(user))
    assert created
    assert not again
    await store_entitlements.grant_entitlement(db, other.id, G, group)
    assert await store_entitlements.entitled_pools(db, user, []) == {pool.id}
    assert await store_entitlements.entitled_pools(db, user, [str(group), "not-a-uuid"]) == {
        pool.id,
        other.id,
    }
    assert await store_entitlements.is_entitled(db, other.id, user, [group])
    assert not await store_entitlements.is_entitled(db, other.id, user, [])
    listed = await store_entitlements.list_entitlements(db, pool.id, limit=10)
    assert [(e.subject_type, str(e.subject_id)) for e in listed] == [(U, user)]
    assert await store_entitlements.revoke_entitlement(db, pool.id, U, uuid.UUID(user))
    assert not await store_entitlements.revoke_entitlement(db, pool.id, U, uuid.UUID(user))


async def test_allocation_gives_the_oldest_free_desktop_and_reconnects(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool()
    ids = await add_desktops(db, pool, 2)
    user = await add_user(db)
    desktop = await store_allocation.allocate_desktop(db, pool, user)
    assert desktop.id == ids[0]
    assert desktop.state is S.IN_USE
    assert desktop.assigned_user == user
    assert (await store_allocation.allocate_desktop(db, pool, user)).id == ids[0]
    other = await store_allocation.allocate_desktop(db, pool, await add_user(db))
    assert other.id == ids[1]
    with pytest.raises(NoDesktopAvailable):
        await store_allocation.allocate_desktop(db, pool, await add_user(db))


@pytest.mark.parametrize("state", [PoolState.DISABLED, PoolState.DRAINING])
async def test_allocation_respects_the_pool_state(
    db: asyncpg.Connection, make_pool: MakePool, state: PoolState
) -> None:
    pool = await make_pool(state=state)
    await add_desktops(db, pool, 1)
    with pytest.raises(PoolUnavailable):
        await store_allocation.allocate_desktop(db, pool, await add_user(db))


async def test_a_persistent_pool_gives_a_user_their_desktop_back(
    db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool(kind=PoolKind.PERSISTENT)
    await add_desktops(db, pool, 3)
    user = await add_user(db)
    first = await store_allocation.allocate_desktop(db, pool, user)
    # The user logs off: the desktop is ready again, still theirs.
    await db.execute("UPDATE desktops SET state = 'ready' WHERE id = $1", first.id)
    again = await store_allocation.allocate_desktop(db, pool, user)
    assert again.id == first.id
    await db.execute("UPDATE desktops SET state = 'refreshing' WHERE id = $1", first.id)
    with pytest.raises(DesktopNotReady):
        await store_allocation.allocate_desktop(db, pool, user)


async def test_concurrent_allocations_never_share_a_desktop(
    migrated_database_url: str, db: asyncpg.Connection, make_pool: MakePool
) -> None:
    ready = 5
    pool = await make_pool()
    ids = await add_desktops(db, pool, ready)
    users = [await add_user(db) for _ in range(2 * ready)]
    connections = await asyncpg.create_pool(migrated_database_url, min_size=2 * ready)
    assert connections is not None

    async def allocate(user: str) -> uuid.UUID | None:
        async with connections.acquire() as connection, connection.transaction():
            try:
                return (await store_allocation.allocate_desktop(connection, pool, user)).id
            except NoDesktopAvailable:
                return None

    try:
        results = await asyncio.gather(*(allocate(user) for user in users))
    finally:
        await connections.close()
    handed = [result for result in results if result is not None]
    assert sorted(handed) == sorted(ids)
    assert results.count(None) == ready


async def test_one_user_never_gets_two_desktops_at_once(
    migrated_database_url: str, db: asyncpg.Connection, make_pool: MakePool
) -> None:
    pool = await make_pool(kind=PoolKind.PERSISTENT)
    await add_desktops(db, pool, 4)
    user = await add_user(db)
    connections = await asyncpg.create_pool(migrated_database_url, min_size=4)
    assert connections is not None

    async def allocate() -> uuid.UUID:
        async with connections.acquire() as connection, connection.transaction():
            return (await store_allocation.allocate_desktop(connection, pool, user)).id

    try:
        results = await asyncio.gather(*(allocate() for _ in range(4)))
    finally:
        await connections.close()
    assert len(set(results)) == 1
