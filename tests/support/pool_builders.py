"""Builders of pools, desktops and VMs for the pure planner's unit tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from deskpool.pools.model import (
    Desktop,
    DesktopState,
    ObservedVm,
    OsType,
    Pool,
    PoolKind,
    PowerState,
)

#: The time every test runs at.
NOW = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
CLUSTER_ID = UUID(int=1)
BASE_POOL = Pool(
    id=UUID(int=100),
    name="lab",
    cluster_id=CLUSTER_ID,
    template="tpl-ubuntu",
    kind=PoolKind.NON_PERSISTENT,
    min_size=0,
    max_size=10,
    spare=0,
    naming_pattern="lab-{n:03}",
    os_type=OsType.LINUX,
)


PoolBuilder = Callable[..., Pool]
DesktopBuilder = Callable[..., Desktop]
VmBuilder = Callable[..., ObservedVm]


def build_pool(**overrides: Any) -> Pool:
    """A valid pool (``lab``, non-persistent, Linux, up to 10 desktops) with ``overrides``."""
    return replace(BASE_POOL, **overrides)


def desktop_builder() -> DesktopBuilder:
    """Return a builder numbering desktops 1, 2, 3... (higher numbers were created later)."""
    numbers: Iterator[int] = itertools.count(1)

    def build(pool: Pool, number: int | None = None, **overrides: Any) -> Desktop:
        n = next(numbers) if number is None else number
        state = overrides.get("state", DesktopState.READY)
        has_vm = state not in (DesktopState.PROVISIONING,)
        fields: dict[str, Any] = {
            "id": UUID(int=pool.id.int * 100_000 + n),
            "pool_id": pool.id,
            "name": pool.naming_pattern.format(n=n),
            "state": state,
            "created_at": NOW - timedelta(days=1) + timedelta(minutes=n),
            "state_changed_at": NOW - timedelta(minutes=1),
            "vm_id": f"{pool.name}-vm-{n}" if has_vm else None,
            "template": pool.template if has_vm else None,
        }
        fields.update(overrides)
        return Desktop(**fields)

    return build


def build_vm(desktop: Desktop, **overrides: Any) -> ObservedVm:
    """The running, tagged VM of ``desktop`` as a driver lists it."""
    fields: dict[str, Any] = {
        "vm_id": desktop.vm_id,
        "name": desktop.name,
        "power_state": PowerState.RUNNING,
        "desktop_id": desktop.id,
        "pool_id": desktop.pool_id,
    }
    fields.update(overrides)
    return ObservedVm(**fields)
