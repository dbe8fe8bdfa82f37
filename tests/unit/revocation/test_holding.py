"""What a user keeps after a change of access (:mod:`deskpool.revocation.model`)."""

from __future__ import annotations

import uuid

from deskpool.permissions import EffectivePermissions
from deskpool.revocation.model import Holding, nobody

USER = uuid.uuid4()
POOL = uuid.uuid4()
OTHER_POOL = uuid.uuid4()


def holding(
    *permissions: str, pools: tuple[uuid.UUID, ...] = (), disabled: bool = False
) -> Holding:
    return Holding(USER, disabled, EffectivePermissions(frozenset(permissions)), frozenset(pools))


def test_an_entitlement_or_pools_manage_keeps_a_desktop() -> None:
    assert holding(pools=(POOL,)).keeps_desktop(POOL)
    assert not holding(pools=(POOL,)).keeps_desktop(OTHER_POOL)
    assert holding("pools:manage").keeps_desktop(OTHER_POOL)
    assert holding("platform:admin").keeps_desktop(OTHER_POOL)
    assert not holding("pools:read", "sessions:manage").keeps_desktop(POOL)


def test_only_sessions_manage_keeps_watching() -> None:
    assert holding("sessions:manage").keeps_watching()
    assert holding("platform:admin").keeps_watching()
    assert not holding("sessions:read", pools=(POOL,)).keeps_watching()
    assert holding("sessions:manage").keeps_session(POOL, read_only=True)
    assert not holding("sessions:manage").keeps_session(POOL, read_only=False)


def test_a_disabled_or_deleted_user_keeps_nothing() -> None:
    disabled = holding("platform:admin", pools=(POOL,), disabled=True)
    assert not disabled.keeps_desktop(POOL)
    assert not disabled.keeps_watching()
    gone = nobody(USER)
    assert not gone.keeps_session(POOL, read_only=False)
    assert not gone.keeps_session(POOL, read_only=True)


def test_a_permission_is_kept_while_held_and_enabled() -> None:
    assert holding("recordings:read").keeps_permission("recordings:read")
    assert holding("platform:admin").keeps_permission("recordings:read")
    assert not holding("sessions:read").keeps_permission("recordings:read")
    assert not holding("recordings:read", disabled=True).keeps_permission("recordings:read")
    assert not nobody(USER).keeps_permission("recordings:read")
