"""The authenticator's memory of principals, against the real Redis (issue 39, item 4).

A cold sign-in hands its principal to the memory and goes on: the principals of a burst of
sign-ins reach Redis together, in a few pipelines, not one round trip each, and every one of
them is recalled afterwards as it signed in.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from deskpool.auth import VerifiedToken
from deskpool.identity.principal import Principal
from deskpool.outage_brokering.snapshot import PrincipalMemory
from deskpool.permissions import EffectivePermissions

ISSUER = "https://idp.example"
SIGN_INS = 200


def _principal(n: int) -> Principal:
    return Principal(
        id=str(uuid.uuid4()),
        issuer=ISSUER,
        subject=f"memory-{n}",
        email=f"memory-{n}@example.com",
        display_name=None,
        disabled=False,
        groups=(),
        claimed_groups=(),
        claimed_roles=(),
        effective=EffectivePermissions(frozenset({"me:read"}), frozenset({"user"})),
        kind="human",
    )


def _token_of(principal: Principal) -> VerifiedToken:
    """A token of ``principal``'s user, as it signs in."""
    return VerifiedToken(
        issuer=ISSUER,
        subject=principal.subject,
        audience=("deskpool",),
        expires_at=time.time() + 60,
        claims={"sub": principal.subject},
    )


def _counting_pipelines(runtime: Any, monkeypatch: Any) -> list[int]:
    """A list whose length is how many pipelines were opened on ``runtime``'s Redis since."""
    pipelines: list[int] = []
    opened = runtime.kv.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        pipelines.append(1)
        return opened(*args, **kwargs)

    monkeypatch.setattr(runtime.kv, "pipeline", counted)
    return pipelines


async def _as_refreshed(runtime: Any, memory: PrincipalMemory) -> None:
    """The snapshot as a refresh leaves it: read after the last change of access."""
    await runtime.kv.set(memory.keys.epoch, 0)
    await runtime.kv.set(memory.keys.refreshed_epoch, 0)


async def test_a_burst_of_sign_ins_is_remembered_in_a_few_writes_and_recalled(
    runtime: Any, monkeypatch: Any
) -> None:
    memory = PrincipalMemory(runtime)
    opened = _counting_pipelines(runtime, monkeypatch)
    await _as_refreshed(runtime, memory)
    principals = [_principal(n) for n in range(SIGN_INS)]

    async def sign_in(principal: Principal) -> None:
        await asyncio.sleep(0)  # the sign-ins of a burst interleave, as requests do
        await memory.remember(principal)

    await asyncio.gather(*(sign_in(principal) for principal in principals))
    await memory.written()

    assert len(opened) <= 3, f"{len(opened)} writes for {SIGN_INS} sign-ins"
    for principal in principals:
        assert await memory.recall(_token_of(principal)) == principal


async def test_sign_ins_arriving_one_by_one_share_a_write(runtime: Any, monkeypatch: Any) -> None:
    # Requests arrive spread out, not all at once: at 1,800 cold sign-ins a second the writer
    # found one or two principals each time it looked, and its pipelines were 5 % of the api
    # (py-spy --gil, the cold GET /me). It gathers them for a moment first.
    memory = PrincipalMemory(runtime)
    opened = _counting_pipelines(runtime, monkeypatch)
    await _as_refreshed(runtime, memory)
    principals = [_principal(n) for n in range(100)]
    for principal in principals:
        await memory.remember(principal)
        await asyncio.sleep(0.001)
    await memory.written()

    assert len(opened) <= 5, f"{len(opened)} writes for 100 sign-ins over 0.1 s or more"
    for principal in principals:
        assert await memory.recall(_token_of(principal)) == principal


async def test_a_principal_signing_in_unchanged_is_not_written_again_for_a_while(
    runtime: Any, monkeypatch: Any
) -> None:
    from deskpool.outage_brokering import snapshot

    memory = PrincipalMemory(runtime)
    writes = _counting_pipelines(runtime, monkeypatch)
    now = [1000.0]
    monkeypatch.setattr(snapshot, "time", type("Clock", (), {"monotonic": lambda: now[0]}))
    principal = _principal(1)

    async def signed_in(signing: Principal) -> int:
        before = len(writes)
        await memory.remember(signing)
        await memory.written()
        return len(writes) - before

    assert await signed_in(principal) == 1
    # The same principal again: it is in Redis as it is (the worker's refresh keeps it so).
    assert await signed_in(principal) == 0
    # Changed (a group more): written at once.
    changed = Principal(**{**vars(principal), "claimed_groups": ("staff",)})
    assert await signed_in(changed) == 1
    assert await signed_in(changed) == 0
    # Unchanged, but long enough after: written again (Redis may have lost it meanwhile).
    now[0] += snapshot.REWRITE_AFTER_SECONDS
    assert await signed_in(changed) == 1


async def test_a_principal_whose_write_failed_is_written_at_its_next_sign_in(
    runtime: Any, monkeypatch: Any
) -> None:
    memory = PrincipalMemory(runtime)
    principal = _principal(2)
    opened = runtime.kv.pipeline
    failing = True

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failing:
            raise ConnectionError("the key-value store is away")
        return opened(*args, **kwargs)

    monkeypatch.setattr(runtime.kv, "pipeline", flaky)
    await memory.remember(principal)
    await memory.written()
    failing = False
    await memory.remember(principal)
    await memory.written()
    await runtime.kv.set(memory.keys.epoch, 0)
    await runtime.kv.set(memory.keys.refreshed_epoch, 0)
    assert await memory.recall(_token_of(principal)) == principal
