"""The outage snapshot's records: what is remembered reads back the same, access as judged."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from deskpool.identity.principal import GroupRef, Principal
from deskpool.outage_brokering.model import (
    Act,
    ActKind,
    RememberedPrincipal,
    SnapshotPool,
    act_fields,
)
from deskpool.permissions import EffectivePermissions


def _principal(**overrides: Any) -> Principal:
    alice = Principal(
        id=str(uuid.uuid4()),
        issuer="https://idp",
        subject="alice",
        email="alice@example.test",
        display_name="Alice",
        disabled=False,
        groups=(GroupRef("g-1", "staff", "member"),),
        claimed_groups=("staff",),
        claimed_roles=(),
        effective=EffectivePermissions(frozenset({"pools:read"}), frozenset({"viewer"})),
    )
    return replace(alice, **overrides)


def test_a_remembered_principal_reads_back_as_it_was() -> None:
    principal = _principal()
    remembered = RememberedPrincipal.from_json(RememberedPrincipal(principal).to_json())
    assert remembered.principal == principal
    assert remembered.matches(("staff",), ())
    # Other groups or roles in the token may mean other permissions: not from the snapshot.
    assert not remembered.matches(("staff", "admins"), ())
    assert not remembered.matches(("staff",), ("admin",))


def test_a_pool_is_opened_by_its_entitled_users_and_groups_never_by_a_disabled_user() -> None:
    pool = SnapshotPool(
        id=uuid.uuid4(),
        name="lab",
        entitled_users=frozenset({"u-direct"}),
        entitled_groups=frozenset({"g-1"}),
        recorded=False,
        idle_timeout=None,
        max_duration=600.0,
    )
    assert pool.may_open(_principal())
    assert pool.may_open(_principal(id="u-direct", groups=()))
    assert not pool.may_open(_principal(groups=(GroupRef("g-2", "other", "member"),)))
    assert not pool.may_open(_principal(disabled=True))
    manager = _principal(groups=(), effective=EffectivePermissions(frozenset({"pools:manage"})))
    assert pool.may_open(manager)
    assert SnapshotPool.from_json(pool.to_json()) == pool


def test_an_act_reads_back_from_its_stream_fields() -> None:
    at = datetime(2026, 11, 29, 5, 0, tzinfo=UTC)
    logon = uuid.uuid4()
    fields = act_fields(ActKind.TOKEN_ISSUED, at, logon_id=logon, user_id=None)
    raw = {key.encode(): value.encode() for key, value in fields.items()}
    act = Act.of_entry(b"1-0", raw)
    assert (act.entry_id, act.kind, act.at) == ("1-0", ActKind.TOKEN_ISSUED, at)
    assert act.id_of("logon_id") == logon
    assert act.optional_id("user_id") is None
