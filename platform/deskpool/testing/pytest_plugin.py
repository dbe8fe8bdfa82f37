"""pytest fixtures for deskpool, its plugins and drivers.

Helpers (plain functions, for fixtures of one's own):

- :func:`connected`: a database connection, tables emptied first, closed on exit.
- :func:`opened_runtime`: an opened runtime for an environment (tables emptied first).
- :func:`served`: a runtime and an aiohttp test client of its API, closed in the right order.

Fixtures:

- ``test_servers``: where the real PostgreSQL and Redis are (failing, never skipping, when
  either does not answer).
- ``migrated_database_url``: a database made for this test run, migrated, dropped at the end;
  ``module_database_url``: the same for one test module.
- ``db``: a connection to ``db_url`` (this run's database unless a conftest overrides
  ``db_url``), the tables of ``db_emptied`` truncated first (none unless overridden); a
  conftest that needs more (a reset, a table of its own) extends it: ``async def db(db)``.
- ``deskpool_environ``: an environment for a process of this test run (the database above,
  Redis, a unique key prefix, the ops listener disabled).
- ``make_config``: build a :class:`deskpool.config.Config` from that environment plus overrides.
- ``runtime``: an opened :class:`deskpool.runtime.Runtime` (api component's plugins loaded).
- ``api_client``: an aiohttp test client for the API application of ``runtime``;
  ``api_client_for``: ``await api_client_for(runtime)``, the same for a runtime of one's own;
  ``client``: the client of ``client_runtime``, which a conftest opening a runtime of its own
  (a module's database, a master key...) overrides to name it.
- ``identity_provider``: a running test OIDC issuer on loopback
  (:class:`deskpool.testing.idp.TestIdentityProvider`).
- ``secure_runtime`` / ``secure_api_client``: the same, configured against that issuer, and
  ``bearer(sub, **claims)``: an ``Authorization`` header for a token it signs.
- ``desktop_daemon``: a running desktop daemon simulator (the guacd fake,
  :class:`deskpool.desktopd.DesktopDaemonSimulator`) on a free loopback port.
- ``license_vendor``: a :class:`deskpool.testing.licensing.TestVendor` whose key this test
  process trusts (no setting can make a deskpool process trust it), to issue licenses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import asyncpg
import pytest

from deskpool.testing.services import (
    ServiceAddresses,
    ServiceMissing,
    check_kvstore,
    create_test_database,
    drop_test_database,
)


def pytest_configure(config: pytest.Config) -> None:
    """Keep stevedore's entry-point cache out of ``~/.cache``, and compose revocation.

    Out of the cache, so tests never see stale results.
    """
    if "DESKPOOL_KEEP_XDG_CACHE" not in os.environ:
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="deskpool-xdg-")
    # Composed as the API's application and the gateway compose it, for tests that call the
    # identity services or the session broker directly (deskpool.identity.access).
    try:
        from deskpool.identity import access
        from deskpool.revocation import service as revocation
    except ImportError as error:
        # A broken import (an import cycle, say) is reported by the tests that import the module
        # and by tests/unit/test_layers.py; it must not stop pytest before they run.
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"revocation is not composed: {error}"), stacklevel=2
        )
        return
    access.install(revocation)


@contextlib.asynccontextmanager
async def connected(url: str, *, emptied: Sequence[str] = ()) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the database at ``url``, closed on exit.

    :param emptied: tables truncated (``CASCADE``) before the connection is handed out.
    """
    connection = await asyncpg.connect(url)
    try:
        if emptied:
            await connection.execute(f"TRUNCATE {', '.join(emptied)} CASCADE")
        yield connection
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def opened_runtime(
    environ: Mapping[str, str],
    components: Sequence[str] = ("api",),
    *,
    emptied: Sequence[str] = (),
) -> AsyncIterator[Any]:
    """An opened :class:`deskpool.runtime.Runtime` for ``environ``, closed on exit.

    The plugins of ``components`` are loaded and the configuration is read from ``environ``
    alone, as a process started with that environment would.

    :param emptied: tables of ``environ``'s database truncated (``CASCADE``) before it opens.
    """
    from deskpool.host import bootstrap
    from deskpool.runtime import Runtime

    if emptied:
        async with connected(environ["DATABASE_URL"], emptied=emptied):
            pass
    process = bootstrap(environ, list(components), log_setup=False)
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    try:
        yield runtime
    finally:
        await runtime.close()


@contextlib.asynccontextmanager
async def served(
    environ: Mapping[str, str], aiohttp_client: Any, *, emptied: Sequence[str] = ()
) -> AsyncIterator[tuple[Any, Any]]:
    """``(runtime, client)``: an opened api runtime and a test client of its application.

    The client (and so the application, the authenticator's listener included) is closed
    before the runtime it uses: a fixture that opens a runtime itself and leaves the client to
    ``aiohttp_client``'s teardown would close them the other way round.

    :param aiohttp_client: the ``aiohttp_client`` fixture of the test.
    :param emptied: tables truncated before the runtime opens.
    """
    from deskpool.api.app import create_app

    async with opened_runtime(environ, emptied=emptied) as runtime:
        client = await aiohttp_client(create_app(runtime))
        try:
            yield runtime, client
        finally:
            await client.close()


@pytest.fixture(scope="session")
def test_servers() -> ServiceAddresses:
    """The servers this test run uses; fails (never skips) when one does not answer."""
    servers = ServiceAddresses.from_environ()
    try:
        asyncio.run(check_kvstore(servers.kv_addr))
    except ServiceMissing as error:
        pytest.fail(str(error), pytrace=False)
    return servers


@contextlib.contextmanager
def fresh_database(
    servers: ServiceAddresses, prefix: str = "deskpool_test", *, migrated: bool = True
) -> Iterator[str]:
    """Create a database (migrated unless ``migrated`` is false), yield its URL, drop it after.

    A server that does not answer fails the test with a message saying how to start it.
    """
    from deskpool.db import migrate

    async def create() -> str:
        url = await create_test_database(servers.admin_url, prefix)
        if migrated:
            async with connected(url) as connection:
                await migrate(connection)
        return url

    try:
        url = asyncio.run(create())
    except ServiceMissing as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield url
    finally:
        asyncio.run(drop_test_database(servers.admin_url, url))


@pytest.fixture(scope="session")
def migrated_database_url(test_servers: ServiceAddresses) -> Iterator[str]:
    """A database of its own for this test run, migrated; dropped when the run ends."""
    with fresh_database(test_servers) as url:
        yield url


@pytest.fixture(scope="module")
def module_database_url(test_servers: ServiceAddresses) -> Iterator[str]:
    """A migrated database of the test module's own, dropped after the module.

    For tests that need a known-empty database, or leave rows others must not see.
    """
    with fresh_database(test_servers, "deskpool_module") as url:
        yield url


@pytest.fixture
def db_url(migrated_database_url: str) -> str:
    """The database ``db`` connects to: this run's (override it for a module's own)."""
    return migrated_database_url


@pytest.fixture
def db_emptied() -> tuple[str, ...]:
    """Tables ``db`` truncates (``CASCADE``) before handing out its connection: none."""
    return ()


@pytest.fixture
async def db(db_url: str, db_emptied: Sequence[str]) -> AsyncIterator[asyncpg.Connection]:
    """A connection to ``db_url``, the tables of ``db_emptied`` truncated first; closed after."""
    async with connected(db_url, emptied=db_emptied) as connection:
        yield connection


@pytest.fixture
def deskpool_environ(migrated_database_url: str, test_servers: ServiceAddresses) -> dict[str, str]:
    """Environment variables for a deskpool process of this test run."""
    return {
        "DATABASE_URL": migrated_database_url,
        "KVSTORE_ADDR": test_servers.kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-test-{secrets.token_hex(4)}:",
        "METRICS_ADDR": "",
        "APP_ENV": "test",
        "LOG_LEVEL": "info",
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", ""),
    }


@pytest.fixture
def make_config(deskpool_environ: dict[str, str]) -> Callable[..., Any]:
    """``make_config(**overrides)``: a configuration from the test environment."""
    from deskpool.host import bootstrap

    def make(components: list[str] | None = None, **overrides: str) -> Any:
        environ = {**deskpool_environ, **overrides}
        return bootstrap(environ, components or ["api"], log_setup=False)

    return make


@pytest.fixture
async def runtime(deskpool_environ: dict[str, str]) -> AsyncIterator[Any]:
    """An opened runtime with the api component's plugins loaded."""
    async with opened_runtime(deskpool_environ) as opened:
        yield opened


@pytest.fixture
def api_client_for(aiohttp_client: Any) -> Callable[[Any], Awaitable[Any]]:
    """``await api_client_for(runtime)``: an aiohttp test client for the API of ``runtime``.

    The client is closed by ``aiohttp_client``'s teardown, so ``runtime`` must come from a
    fixture set up before this one (one the fixture using this depends on).
    """
    from deskpool.api.app import create_app

    async def make(runtime: Any) -> Any:
        return await aiohttp_client(create_app(runtime))

    return make


@pytest.fixture
async def api_client(runtime: Any, api_client_for: Callable[[Any], Awaitable[Any]]) -> Any:
    """An aiohttp test client for the API application of ``runtime``."""
    return await api_client_for(runtime)


@pytest.fixture
def client_runtime(runtime: Any) -> Any:
    """The runtime whose API ``client`` calls: ``runtime`` (a conftest overrides it)."""
    return runtime


@pytest.fixture
async def client(client_runtime: Any, api_client_for: Callable[[Any], Awaitable[Any]]) -> Any:
    """An aiohttp test client for the API application of ``client_runtime``."""
    return await api_client_for(client_runtime)


@pytest.fixture
async def identity_provider() -> AsyncIterator[Any]:
    """A running test OIDC issuer on loopback."""
    from deskpool.testing.idp import TestIdentityProvider

    async with TestIdentityProvider() as idp:
        yield idp


@pytest.fixture
def secure_environ(deskpool_environ: dict[str, str], identity_provider: Any) -> dict[str, str]:
    """The test environment, with the OIDC issuer and audience of ``identity_provider``."""
    return {
        **deskpool_environ,
        "AUTH_OIDC_ISSUER_URL": identity_provider.issuer_url,
        "AUTH_OIDC_AUDIENCE": identity_provider.audience,
    }


@pytest.fixture
async def secure_runtime(secure_environ: dict[str, str]) -> AsyncIterator[Any]:
    """An opened runtime whose API authenticates against ``identity_provider``."""
    async with opened_runtime(secure_environ) as opened:
        yield opened


@pytest.fixture
async def secure_api_client(
    secure_runtime: Any, api_client_for: Callable[[Any], Awaitable[Any]]
) -> Any:
    """An aiohttp test client for the API of ``secure_runtime``."""
    return await api_client_for(secure_runtime)


@pytest.fixture
def bearer(identity_provider: Any) -> Callable[..., dict[str, str]]:
    """``bearer(sub, **claims)``: headers carrying a token the test issuer signed."""

    def make(sub: str = "alice", **claims: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {identity_provider.issue_token(sub, **claims)}"}

    return make


@pytest.fixture
async def desktop_daemon() -> AsyncIterator[Any]:
    """A running desktop daemon simulator on a free loopback port (``.address``)."""
    from deskpool.desktopd import DesktopDaemonSimulator

    daemon = DesktopDaemonSimulator("127.0.0.1", 0)
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


@pytest.fixture(scope="session")
def license_vendor() -> Iterator[Any]:
    """A test vendor whose license-signing key this process trusts for the session."""
    from deskpool.testing.licensing import TestVendor

    vendor = TestVendor()
    try:
        yield vendor
    finally:
        vendor.forget()
