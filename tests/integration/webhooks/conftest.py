"""Fixtures of the webhook tests: the API, callers and a receiver.

The API runs on the module's own database with a master key (the signing secrets are sealed);
the receiver verifies signatures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.support.webhooks import WebhookReceiver

from deskpool.runtime import Runtime


@pytest.fixture
def client_runtime(pools_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``pools_runtime`` (tests/support/pool_api.py)."""
    return pools_runtime


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    """A webhook receiver on loopback."""
    async with WebhookReceiver() as running:
        yield running


@pytest.fixture(autouse=True)
async def no_webhooks(pools_runtime: Runtime) -> None:
    """Each test starts without webhooks (the module's database is shared by its tests)."""
    async with pools_runtime.db.acquire() as connection:
        await connection.execute("DELETE FROM webhook_subscriptions")
