"""The host runtime of one process: configuration, plugins, connections, components.

:class:`Runtime` owns what every component of a process shares: the frozen configuration, the
plugin host, the PostgreSQL pool, the Redis client and the Prometheus registry. Components are
created by factories that plugins register through ``deskpool_register_components``; the host
(:mod:`deskpool.host`) starts them in the order named and stops them in reverse.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import asyncpg
import redis.asyncio as redis
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from deskpool.db import connect_pool, schema_status
from deskpool.errors import SchemaOutOfDate, StartupError
from deskpool.kv import connect_kv

if TYPE_CHECKING:
    from deskpool.clusters.drivers import DriverManager
    from deskpool.config import Config
    from deskpool.licensing.context import LicensingContext
    from deskpool.plugins import PluginHost
    from deskpool.recordings.stores import RecordingStore
    from deskpool.secrets import SecretStore

log = logging.getLogger(__name__)


@runtime_checkable
class Component(Protocol):
    """A part of a process (``api``, ``worker``, ``gateway``, ``web``).

    ``start`` returns once the component serves (a listener bound, a loop running); ``stop``
    drains within the component's own shutdown timeout and returns when it has stopped.
    """

    name: str

    async def start(self) -> None:
        """Start serving."""

    async def stop(self) -> None:
        """Drain and stop."""

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has completed and :meth:`stop` has not begun."""


ComponentFactory = Callable[["Runtime"], Component]


@dataclass(frozen=True)
class ReadinessCheck:
    """A named check ``/readyz`` runs; ``probe`` raises (any exception) when not ready.

    What the probe returns (a mapping, or ``None``) is shown with the check's result.
    """

    name: str
    probe: Callable[[], Awaitable[Mapping[str, object] | None]]


class Runtime:
    """What the components of one process share.

    :param config: the frozen configuration.
    :param plugins: the loaded plugins.
    """

    def __init__(self, config: Config, plugins: PluginHost) -> None:
        self.config = config
        self.plugins = plugins
        self.metrics = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.metrics)
        PlatformCollector(registry=self.metrics)
        GCCollector(registry=self.metrics)
        self.components: dict[str, Component] = {}
        self._db: asyncpg.Pool | None = None
        self._kv: redis.Redis | None = None
        self._drivers: DriverManager | None = None
        self._secret_store: SecretStore | None = None
        self._recording_store: RecordingStore | None = None
        self._licensing: LicensingContext | None = None
        self._opened = False

    @property
    def db(self) -> asyncpg.Pool:
        """The PostgreSQL connection pool (``DATABASE_MAX_CONNS`` connections at most)."""
        if self._db is None:
            raise RuntimeError("the runtime is not open")
        return self._db

    @property
    def kv(self) -> redis.Redis:
        """The Redis client."""
        if self._kv is None:
            raise RuntimeError("the runtime is not open")
        return self._kv

    @property
    def drivers(self) -> DriverManager:
        """The hypervisor driver manager of this process (made on first use)."""
        if self._drivers is None:
            from deskpool.clusters.drivers import DriverManager

            self._drivers = DriverManager(self)
        return self._drivers

    @property
    def secret_store(self) -> SecretStore:
        """The secret store ``SECRET_STORE`` chooses (made on first use)."""
        if self._secret_store is None:
            from deskpool.secrets import build_secret_store

            self._secret_store = build_secret_store(self.plugins, self.config)
        return self._secret_store

    @property
    def recording_store(self) -> RecordingStore:
        """The recording store ``RECORDING_STORE`` chooses (made on first use)."""
        if self._recording_store is None:
            from deskpool.recordings.stores import build_recording_store

            self._recording_store = build_recording_store(self.plugins, self)
        return self._recording_store

    @property
    def licensing(self) -> LicensingContext:
        """The licensing side of this process: keys, clock, build verdict, metrics."""
        if self._licensing is None:
            from deskpool.licensing.context import LicensingContext

            self._licensing = LicensingContext.from_config(self.config, self.metrics)
        return self._licensing

    async def open(self, *, require_current_schema: bool = True) -> None:
        """Connect to PostgreSQL and Redis, check the schema, and run plugin startup hooks.

        :raises StartupError: a store cannot be reached, or the schema is behind the code.
        """
        self._db = await connect_pool(self.config)
        try:
            self._kv = await connect_kv(self.config)
            if require_current_schema:
                status = await schema_status(self._db)
                if status.pending:
                    raise SchemaOutOfDate(
                        f"the database schema is behind this version of deskpool "
                        f"({len(status.pending)} migration(s) pending: "
                        f"{', '.join(status.pending)}); run `deskpool migrate` first"
                    )
            await self.plugins.startup(self)
            self.licensing.check_build()
        except BaseException:
            await self._close_connections()
            raise
        self._opened = True

    async def close(self) -> None:
        """Run plugin shutdown hooks and close the connections."""
        if self._opened:
            self._opened = False
            try:
                await self.plugins.shutdown(self)
            except StartupError:
                raise
            except Exception:
                log.exception("a plugin's shutdown hook failed")
        await self._close_connections()

    async def _close_connections(self) -> None:
        if self._kv is not None:
            await self._kv.aclose()
            self._kv = None
        if self._db is not None:
            await self._db.close()
            self._db = None

    def readiness_checks(self) -> list[ReadinessCheck]:
        """The checks ``/readyz`` runs: the stores, the schema, the components, and plugins'."""

        async def database() -> None:
            async with self.db.acquire(timeout=2) as connection:
                await connection.fetchval("SELECT 1")

        async def kvstore() -> None:
            await self.kv.ping()

        async def schema() -> None:
            status = await schema_status(self.db)
            if status.pending:
                raise RuntimeError(f"pending migrations: {', '.join(status.pending)}")

        async def clock() -> Mapping[str, object]:
            # Reported, never failing: a wrong clock is for the operator to fix, not a reason
            # to stop serving.
            from deskpool.licensing.service import clock_reading

            async with self.db.acquire(timeout=2) as connection:
                return (await clock_reading(connection, self.licensing)).as_details()

        async def components() -> None:
            stopped = [name for name, c in self.components.items() if not c.started]
            if stopped:
                raise RuntimeError(f"not started: {', '.join(stopped)}")

        return [
            ReadinessCheck("database", database),
            ReadinessCheck("kvstore", kvstore),
            ReadinessCheck("schema", schema),
            ReadinessCheck("components", components),
            ReadinessCheck("clock", clock),
            *self.plugins.readiness_checks(self),
        ]
