"""The pool API's fixtures, shared by the pool, session, webhook, recording and syslog tests.

A pytest plugin (``pytest_plugins`` in the root tests/conftest.py), so every folder sees them:
the API tests' environment and runtime on the module's own database with a master key,
signed-in callers, clusters made through the API. ``client_runtime`` is not among them (it
would replace the public plugin's for every test): a folder whose ``client`` calls
``pools_runtime`` says so in its conftest.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import opened_runtime
from tests.integration.seed import seed_user
from tests.support.pools import (
    TUNNEL_URL,
    Caller,
    Headers,
)


@pytest.fixture
def pools_environ(sealing_environ: dict[str, str]) -> dict[str, str]:
    """The secure test environment on the module's database, with a master key."""
    return {
        **sealing_environ,
        "POOL_RECONCILE_INTERVAL": "20s",
        "GATEWAY_PUBLIC_WS_URL": TUNNEL_URL,
    }


@pytest.fixture
async def pools_runtime(pools_environ: dict[str, str]) -> AsyncIterator[Runtime]:
    """An opened api runtime on the module's database, emptied of pools and clusters."""
    async with opened_runtime(pools_environ, emptied=("clusters", "jobs")) as runtime:
        yield runtime


@pytest.fixture
def new_caller(
    pools_runtime: Runtime, identity_provider: Any, bearer: Callable[..., Headers]
) -> Callable[..., Awaitable[Caller]]:
    """``await new_caller(*permissions, groups=())``: a new signed-in user."""

    async def make(*permissions: str, groups: Sequence[str] = ()) -> Caller:
        subject = f"user-{secrets.token_hex(6)}"
        user_id = await seed_user(
            pools_runtime, identity_provider.issuer_url, subject, *permissions, groups=groups
        )
        return Caller(user_id, bearer(subject))

    return make


@pytest.fixture
async def api_cluster(pools_runtime: Runtime) -> Callable[..., Awaitable[str]]:
    """``await api_cluster(driver="simulator", **options)``: a cluster record's id."""

    async def make(driver: str = "simulator", **options: Any) -> str:
        async with pools_runtime.db.acquire() as connection:
            cluster_id = await connection.fetchval(
                "INSERT INTO clusters (name, driver, endpoint, options) "
                "VALUES ($1, $2, 'simulator://local', $3::jsonb) RETURNING id",
                f"cluster-{secrets.token_hex(6)}",
                driver,
                json.dumps(options),
            )
        return str(cluster_id)

    return make
