"""The pure planner converges: property checks over many generated pools.

Each scenario is generated from ``random.Random(seed)``: a pool with random settings and
state, desktops in every state (some inconsistent with the cluster), VMs that vanished,
orphans, duplicates, stopped spares and foreign VMs. The actions of a pass are applied the way
the worker applies them (the desktop events through :func:`deskpool.desktops.states.transition`,
so an action that is illegal in its desktop's state fails the test), and then:

- a second pass at the same time finds nothing left to do;
- a pool's records never exceed ``max_size`` (or what it already had above it);
- no desktop gets two actions, no owned or in-session desktop is deleted or rebuilt while its
  VM exists, and a disabled pool is left alone;
- with jobs that succeed and time that passes, every pool settles: an enabled pool has
  exactly the desktops it needs, all ready or in use, and nothing left to do;
- a pool planned with a schedule's targets (some scenarios) settles with at least the
  desktops it wants powered on (as many as it has, if fewer), never deletes a desktop below
  ``max_size`` to shrink, and with ``idle: power_off`` keeps no free ready desktop powered
  on beyond them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from deskpool.desktops.states import (
    AgentReady,
    Cloned,
    Refreshed,
    Started,
    WindowsReady,
    transition,
)
from deskpool.pools.model import (
    Desktop,
    DesktopState,
    ObservedVm,
    OsType,
    Pool,
    PoolKind,
    PoolState,
    PowerState,
)
from deskpool.pools.naming import name_key
from deskpool.reconciliation.plan import (
    Action,
    CreateDesktop,
    DeleteDesktop,
    DeleteOrphanVm,
    MarkVmMissing,
    PowerOffDesktop,
    PowerOn,
    PowerUpDesktop,
    ReconcilePolicy,
    RefreshDesktop,
    ReplaceDesktop,
    ReportOrphan,
    RetryFailed,
    TimeOutStep,
    desktop_event,
)
from deskpool.reconciliation.planner import plan_pool
from deskpool.schedules.model import IdlePolicy, Targets

S = DesktopState
START = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
TEMPLATES = ("tpl-a", "tpl-b")
ERRORS = ("timeout", "clone failed: no space left", "VM missing from the cluster")


@dataclass
class World:
    """A pool, its desktop records and its cluster, as the worker would see them."""

    pool: Pool
    desktops: list[Desktop]
    vms: list[ObservedVm]
    policy: ReconcilePolicy
    now: datetime
    known_orphans: set[str] = field(default_factory=set)
    serial: int = 0
    targets: Targets | None = None

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial

    def records(self) -> int:
        return len(self.desktops)

    def actions(self) -> list[Action]:
        return list(
            plan_pool(
                self.pool,
                self.desktops,
                self.vms,
                self.now,
                self.policy,
                known_orphans=self.known_orphans,
                targets=self.targets,
            ).actions
        )


def generate(seed: int) -> World:
    """A random pool with random desktops and a random cluster around them."""
    rng = random.Random(seed)
    max_size = rng.randint(1, 12)
    kind = rng.choice(list(PoolKind))
    pool = Pool(
        id=UUID(int=1000 + seed),
        name=f"pool{seed}",
        cluster_id=UUID(int=1),
        template=rng.choice(TEMPLATES),
        kind=kind,
        min_size=rng.randint(0, max_size),
        max_size=max_size,
        spare=rng.randint(0, max_size),
        naming_pattern=rng.choice(["lab-{n:03}", "d{n}"]),
        os_type=rng.choice(list(OsType)),
        state=rng.choices(list(PoolState), weights=[6, 2, 2])[0],
    )
    now = START
    desktops: list[Desktop] = []
    vms: list[ObservedVm] = []
    numbers = rng.sample(range(1, 40), k=rng.randint(0, max_size + 4))
    for serial, number in enumerate(numbers, start=1):
        state = rng.choice(list(DesktopState))
        if state is S.WAITING_FOR_WINDOWS and pool.os_type is OsType.LINUX:
            state = S.WAITING_FOR_AGENT
        user = None
        if state is S.IN_USE or (kind is PoolKind.PERSISTENT and rng.random() < 0.4):
            user = f"user{serial}"
        has_vm = state is not S.PROVISIONING or rng.random() < 0.5
        changed = now - timedelta(minutes=rng.choice([0, 1, 5, 20, 45, 90, 600]))
        desktop = Desktop(
            id=UUID(int=pool.id.int * 1000 + serial),
            pool_id=pool.id,
            name=pool.naming_pattern.format(n=number),
            state=state,
            created_at=now - timedelta(minutes=rng.randint(0, 10_000)),
            state_changed_at=changed,
            vm_id=f"vm-{serial}" if has_vm else None,
            template=rng.choice([*TEMPLATES, None]) if has_vm else None,
            assigned_user=user,
            in_session=state is S.IN_USE and rng.random() < 0.5,
            used_since_refresh=state is S.IN_USE or (state is S.READY and rng.random() < 0.3),
        )
        if state is S.FAILED:
            desktop = replace(
                desktop,
                failed_step=rng.choice([S.PROVISIONING, S.WAITING_FOR_AGENT, S.READY, S.DELETING]),
                last_error=rng.choice(ERRORS),
                failure_count=rng.randint(1, 6),
                last_failed_at=changed,
            )
        desktops.append(desktop)
        if desktop.vm_id is not None and rng.random() < 0.85:
            vms.append(
                ObservedVm(
                    vm_id=desktop.vm_id,
                    name=desktop.name,
                    power_state=rng.choice(list(PowerState)),
                    desktop_id=desktop.id,
                    pool_id=pool.id,
                )
            )
        if rng.random() < 0.1:  # a second VM tagged for the desktop
            vms.append(
                ObservedVm(
                    vm_id=f"dup-{serial}",
                    name=f"{desktop.name}-copy",
                    power_state=PowerState.STOPPED,
                    desktop_id=desktop.id,
                    pool_id=pool.id,
                )
            )
    for orphan in range(rng.randint(0, 2)):
        vms.append(
            ObservedVm(
                vm_id=f"orphan-{orphan}",
                name=pool.naming_pattern.format(n=50 + orphan),
                power_state=PowerState.RUNNING,
                desktop_id=UUID(int=9_000_000 + orphan) if rng.random() < 0.5 else None,
                pool_id=pool.id,
            )
        )
    for foreign in range(rng.randint(0, 2)):  # not deskpool's, but their names are taken
        vms.append(
            ObservedVm(
                vm_id=f"foreign-{foreign}",
                name=pool.naming_pattern.format(n=rng.randint(1, 12)).upper(),
                power_state=PowerState.STOPPED,
            )
        )
    policy = ReconcilePolicy(delete_orphans=rng.random() < 0.3)
    world = World(pool, desktops, vms, policy, now, serial=len(numbers))
    world.known_orphans = {vm.vm_id for vm in vms if rng.random() < 0.3}
    if rng.random() < 0.35:  # a schedule's phase in force
        world.targets = Targets(
            min_ready=rng.randint(0, max_size),
            spare=rng.randint(0, 2),
            idle=rng.choice(list(IdlePolicy)),
        )
    return world


def target_of(world: World) -> tuple[int, int]:
    """(desktops the pool needs, desktops users hold) from the records as they are."""
    pool = world.pool
    live = [d for d in world.desktops if d.state is not S.DELETING]
    held = sum(1 for d in live if d.is_busy)
    return min(pool.max_size, max(pool.min_size, held + pool.spare)), held


def check_actions(world: World, actions: Sequence[Action]) -> None:
    """What must hold of any single pass."""
    pool = world.pool
    by_id = {desktop.id: desktop for desktop in world.desktops}
    present = {vm.vm_id for vm in world.vms}
    touched: list[object] = []
    for action in actions:
        match action:
            case CreateDesktop():
                assert pool.state is PoolState.ENABLED
            case ReportOrphan(vm_id=vm_id) | DeleteOrphanVm(vm_id=vm_id):
                touched.append(vm_id)
                assert vm_id in present
                if isinstance(action, DeleteOrphanVm):
                    assert world.policy.delete_orphans
                    assert pool.state is not PoolState.DISABLED
                else:
                    assert vm_id not in world.known_orphans
            case _:
                touched.append(action.desktop_id)
                desktop = by_id[action.desktop_id]
                if isinstance(action, TimeOutStep | MarkVmMissing):
                    continue
                assert pool.state is not PoolState.DISABLED, action
                if isinstance(action, DeleteDesktop | RefreshDesktop | ReplaceDesktop):
                    owned = pool.kind is PoolKind.PERSISTENT and desktop.assigned_user
                    assert not owned, action
                    if desktop.in_session or desktop.state is S.IN_USE:
                        assert desktop.vm_id not in present, action
    assert len(touched) == len(set(touched)), actions

    created = [action.name for action in actions if isinstance(action, CreateDesktop)]
    taken = {name_key(d.name) for d in world.desktops} | {name_key(v.name) for v in world.vms}
    keys = [name_key(name) for name in created]
    assert len(keys) == len(set(keys))
    assert not taken & set(keys), created


def apply(world: World, actions: Sequence[Action]) -> None:
    """Apply a pass's actions to the records and the cluster, as the worker does."""
    by_id = {desktop.id: desktop for desktop in world.desktops}
    for action in actions:
        match action:
            case CreateDesktop(name=name):
                serial = world.next_serial()
                desktop = Desktop(
                    id=UUID(int=world.pool.id.int * 1000 + serial),
                    pool_id=world.pool.id,
                    name=name,
                    state=S.PROVISIONING,
                    created_at=world.now,
                    state_changed_at=world.now,
                )
                by_id[desktop.id] = desktop
            case PowerOn(vm_id=vm_id):
                world.vms = [
                    replace(vm, power_state=PowerState.RUNNING) if vm.vm_id == vm_id else vm
                    for vm in world.vms
                ]
            case ReportOrphan(vm_id=vm_id):
                world.known_orphans.add(vm_id)
            case DeleteOrphanVm(vm_id=vm_id):
                world.vms = [vm for vm in world.vms if vm.vm_id != vm_id]
            case _:
                event = desktop_event(action)
                assert event is not None, action
                desktop = by_id[action.desktop_id]
                by_id[desktop.id] = transition(desktop, event, pool=world.pool, now=world.now)
    world.desktops = list(by_id.values())


def run_jobs(world: World) -> None:
    """Every job takes its desktop one step further, successfully."""
    pool = world.pool
    kept: list[Desktop] = []
    for desktop in world.desktops:
        if desktop.state is S.DELETING:
            world.vms = [
                vm for vm in world.vms if vm.vm_id != desktop.vm_id and vm.desktop_id != desktop.id
            ]
            continue
        if desktop.state in (S.PROVISIONING, S.REFRESHING):
            world.vms = [
                vm for vm in world.vms if vm.vm_id != desktop.vm_id and vm.desktop_id != desktop.id
            ]
            vm_id = f"vm-{world.next_serial()}"
            world.vms.append(
                ObservedVm(
                    vm_id=vm_id,
                    name=desktop.name,
                    power_state=PowerState.RUNNING,
                    desktop_id=desktop.id,
                    pool_id=pool.id,
                )
            )
            done = Cloned if desktop.state is S.PROVISIONING else Refreshed
            desktop = transition(desktop, done(vm_id, pool.template), pool=pool, now=world.now)
        elif desktop.state is S.STARTING:
            desktop = transition(desktop, Started(), pool=pool, now=world.now)
        elif desktop.state is S.WAITING_FOR_AGENT:
            desktop = transition(desktop, AgentReady(), pool=pool, now=world.now)
        elif desktop.state is S.WAITING_FOR_WINDOWS:
            desktop = transition(desktop, WindowsReady(), pool=pool, now=world.now)
        kept.append(desktop)
    world.desktops = kept


@pytest.mark.parametrize("block", range(10))
def test_a_second_pass_has_nothing_left_to_do(block: int) -> None:
    for seed in range(block * 60, (block + 1) * 60):
        world = generate(seed)
        bound = max(world.pool.max_size, world.records())
        actions = world.actions()
        check_actions(world, actions)
        apply(world, actions)
        assert world.records() <= bound, seed
        again = world.actions()
        assert again == [], (seed, actions, again)


@pytest.mark.parametrize("block", range(10))
def test_pools_settle_when_jobs_succeed(block: int) -> None:
    for seed in range(10_000 + block * 30, 10_000 + (block + 1) * 30):
        world = generate(seed)
        bound = max(world.pool.max_size, world.records())
        for _ in range(40):
            actions = world.actions()
            check_actions(world, actions)
            apply(world, actions)
            assert world.records() <= bound, seed
            bound = max(world.pool.max_size, world.records())
            run_jobs(world)
            world.now += timedelta(minutes=10)
        assert world.actions() == [], seed
        if world.pool.state is PoolState.DISABLED:
            continue
        states = {desktop.state for desktop in world.desktops}
        if world.targets is not None and world.pool.state is PoolState.ENABLED:
            check_scheduled(world, seed)
            continue
        assert states <= {S.READY, S.IN_USE}, (seed, states)
        target, held = target_of(world)
        if world.pool.state is PoolState.ENABLED:
            assert len(world.desktops) == max(target, held), seed
        else:
            assert len(world.desktops) == held, seed


def check_scheduled(world: World, seed: int) -> None:
    """What a settled pool planned with a schedule's targets has."""
    targets, pool = world.targets, world.pool
    assert targets is not None
    states = {desktop.state for desktop in world.desktops}
    assert states <= {S.READY, S.IN_USE, S.POWERED_OFF}, (seed, states)
    power_off = targets.idle is IdlePolicy.POWER_OFF
    # With power_off, a persistent pool's desktops whose owner has no session rest powered off
    # (still assigned); the targets count the others.
    resting = [
        d
        for d in world.desktops
        if power_off
        and pool.is_persistent
        and d.assigned_user is not None
        and d.state in (S.READY, S.POWERED_OFF)
        and not d.in_session
    ]
    assert all(d.state is S.POWERED_OFF for d in resting), seed
    busy = sum(1 for d in world.desktops if d.is_busy) - len(resting)
    wanted = min(pool.max_size, max(targets.min_ready, busy + targets.spare))
    powered = [d for d in world.desktops if d.state is not S.POWERED_OFF]
    assert len(powered) >= min(wanted, len(world.desktops) - len(resting)), seed
    everyone = busy + len(resting) + targets.spare
    assert len(world.desktops) >= min(
        pool.max_size, max(pool.min_size, targets.min_ready, everyone)
    ), seed
    if power_off:
        free = [d for d in powered if d.is_available]
        assert len(powered) <= wanted or not free, seed


def test_the_generator_covers_the_interesting_cases() -> None:
    """The scenarios exercise every kind of action, so the properties are not vacuous."""
    seen: set[str] = set()
    for seed in range(600):
        world = generate(seed)
        seen.update(action.kind for action in world.actions())
    assert seen == {
        kind.kind
        for kind in (
            CreateDesktop,
            DeleteDesktop,
            ReplaceDesktop,
            RetryFailed,
            RefreshDesktop,
            MarkVmMissing,
            TimeOutStep,
            PowerOn,
            PowerOffDesktop,
            PowerUpDesktop,
            ReportOrphan,
            DeleteOrphanVm,
        )
    }
