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


async def test_a_burst_of_sign_ins_is_remembered_in_a_few_writes_and_recalled(
    runtime: Any, monkeypatch: Any
) -> None:
    memory = PrincipalMemory(runtime)
    pipelines = 0
    opened = runtime.kv.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal pipelines
        pipelines += 1
        return opened(*args, **kwargs)

    monkeypatch.setattr(runtime.kv, "pipeline", counted)
    # The snapshot as a refresh leaves it: read after the last change of access.
    await runtime.kv.set(memory.keys.epoch, 0)
    await runtime.kv.set(memory.keys.refreshed_epoch, 0)
    principals = [_principal(n) for n in range(SIGN_INS)]

    async def sign_in(principal: Principal) -> None:
        await asyncio.sleep(0)  # the sign-ins of a burst interleave, as requests do
        await memory.remember(principal)

    await asyncio.gather(*(sign_in(principal) for principal in principals))
    await memory.written()

    assert pipelines <= 3, f"{pipelines} writes for {SIGN_INS} sign-ins"
    for principal in principals:
        token = VerifiedToken(
            issuer=ISSUER,
            subject=principal.subject,
            audience=("deskpool",),
            expires_at=time.time() + 60,
            claims={"sub": principal.subject},
        )
        assert await memory.recall(token) == principal
