"""Fixtures of the API contract tests: an API application with test-only operations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.integration.api.extra_operations import ApiClientFactory, ExtraOperations

from deskpool.runtime import Runtime


@pytest.fixture
async def make_api_client(
    make_config: Callable[..., Any], aiohttp_client: Any
) -> AsyncIterator[ApiClientFactory]:
    """``await make_api_client(numbers=0, **settings)``: a client for an API with test operations.

    :param numbers: how many items ``GET /test/numbers`` lists.
    :param settings: configuration overrides (``API_RATE_LIMIT_PER_MINUTE="3"``...).
    """
    from deskpool.api.app import create_app

    opened: list[tuple[Any, Runtime]] = []

    async def make(numbers: int = 0, **settings: str) -> Any:
        process = make_config(**settings)
        process.plugins.pm.register(ExtraOperations(numbers), name="test-operations")
        runtime = Runtime(process.config, process.plugins)
        await runtime.open()
        client = await aiohttp_client(create_app(runtime))
        opened.append((client, runtime))
        return client

    yield make
    for client, runtime in reversed(opened):
        await client.close()
        await runtime.close()
