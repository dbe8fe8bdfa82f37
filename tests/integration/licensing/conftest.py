"""Fixtures of the licensing tests: a database of their own, a runtime, callers, a clock.

Licensing state is one row per deployment, so these tests run on a database of this package's
own, reset before each test (no license, a fresh watermark, no reports, no pools).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from tests.integration.seed import seed_user
from tests.support.licensing import (
    RESET,
    Clock,
    Headers,
)

from deskpool.licensing.context import LicensingContext
from deskpool.licensing.watermark import WatermarkKeys
from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import fresh_database, opened_runtime
from deskpool.testing.services import ServiceAddresses


@pytest.fixture(scope="package")
def licensing_database(test_servers: ServiceAddresses) -> Iterator[str]:
    """A migrated database of these tests' own."""
    with fresh_database(test_servers, prefix="deskpool_licensing") as url:
        yield url


@pytest.fixture(scope="package")
def master_key() -> bytes:
    """The ``SECRETS_MASTER_KEY`` of these tests."""
    return secrets.token_bytes(32)


@pytest.fixture
def db_url(licensing_database: str) -> str:
    """``db`` connects to the licensing database."""
    return licensing_database


@pytest.fixture
async def db(db: asyncpg.Connection) -> asyncpg.Connection:
    """A connection to the licensing database, reset to a deployment with no license."""
    await db.execute(RESET)
    return db


@pytest.fixture
def licensing_environ(
    secure_environ: dict[str, str], licensing_database: str, master_key: bytes
) -> dict[str, str]:
    """The secure test environment on the licensing database, with a master key."""
    return {
        **secure_environ,
        "DATABASE_URL": licensing_database,
        "SECRETS_MASTER_KEY": base64.b64encode(master_key).decode(),
    }


@pytest.fixture
async def lic_runtime(
    licensing_environ: dict[str, str], db: asyncpg.Connection
) -> AsyncIterator[Runtime]:
    """An opened api runtime on the licensing database."""
    async with opened_runtime(licensing_environ) as runtime:
        yield runtime


@pytest.fixture
def client_runtime(lic_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``lic_runtime``."""
    return lic_runtime


@pytest.fixture
def new_caller(
    lic_runtime: Runtime, identity_provider: Any, bearer: Callable[..., Headers]
) -> Callable[..., Awaitable[Headers]]:
    """``await new_caller(*permissions)``: headers of a new signed-in user holding them."""

    async def make(*permissions: str) -> Headers:
        subject = f"user-{secrets.token_hex(6)}"
        await seed_user(lic_runtime, identity_provider.issuer_url, subject, *permissions)
        return bearer(subject)

    return make


@pytest.fixture
def make_context(master_key: bytes) -> Callable[[Clock], LicensingContext]:
    """``make_context(clock)``: the licensing side of a fresh process with that clock."""

    def make(clock: Clock) -> LicensingContext:
        return LicensingContext(WatermarkKeys.derive(master_key), clock=clock)

    return make
