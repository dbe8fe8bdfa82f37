"""The audit trail of refused escalations, for every service that checks the rule.

A change refused by :func:`deskpool.identity.rules.check_escalation` (or another refusal of
:class:`~deskpool.identity.rules.EscalationDenied`) is rolled back with its transaction; the
refusal itself is recorded afterwards, in a transaction of its own, as a denied
``access.escalation_denied`` event naming what was missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from deskpool.actor import Actor
from deskpool.identity.rules import EscalationDenied

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@contextlib.asynccontextmanager
async def audited_refusals(runtime: Runtime, actor: Actor) -> AsyncIterator[None]:
    """Record an :class:`EscalationDenied` raised in the block, then let it through."""
    try:
        yield
    except EscalationDenied as refusal:
        async with runtime.db.acquire() as connection:
            await actor.record(
                connection,
                "access.escalation_denied",
                refusal.resource_type,
                None,
                {"missing_permissions": refusal.missing, "detail": refusal.detail},
                outcome="denied",
            )
        raise
