"""What the planner tests share: readable descriptions of plans, observed VMs, failed desktops."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tests.support.pool_builders import (
    DesktopBuilder,
    VmBuilder,
)

from deskpool.pools.model import (
    Desktop,
    DesktopState,
    ObservedVm,
    Pool,
)
from deskpool.reconciliation.plan import (
    Action,
    CreateDesktop,
    DeleteOrphanVm,
    ReconcilePolicy,
    ReportOrphan,
)

S = DesktopState
POLICY = ReconcilePolicy()


def described(actions: Sequence[Action], desktops: Sequence[Desktop]) -> list[tuple[str, str]]:
    """Each action as (kind, the name of what it acts on), for readable assertions."""
    names = {desktop.id: desktop.name for desktop in desktops}
    out = []
    for action in actions:
        match action:
            case CreateDesktop(name=name) | ReportOrphan(name=name) | DeleteOrphanVm(name=name):
                out.append((action.kind, name))
            case _:
                out.append((action.kind, names[action.desktop_id]))
    return out


def observed(desktops: Sequence[Desktop], make_vm: VmBuilder) -> list[ObservedVm]:
    """The VMs of the desktops that have one, all running."""
    return [make_vm(desktop) for desktop in desktops if desktop.vm_id is not None]


def failed(make_desktop: DesktopBuilder, pool: Pool, now: datetime, **overrides: object) -> Desktop:
    fields: dict[str, object] = {
        "state": S.FAILED,
        "failed_step": S.WAITING_FOR_AGENT,
        "last_error": "timeout",
        "failure_count": 1,
        "last_failed_at": now - timedelta(hours=2),
    }
    fields.update(overrides)
    return make_desktop(pool, **fields)
