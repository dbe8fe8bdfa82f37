"""The drivers of a process: which are installed, and a driver built for a cluster record.

:class:`DriverManager` is made once per runtime (:func:`driver_manager_for`). It reads the
installed drivers from the ``deskpool_register_hypervisor_drivers`` hook once, and builds a
driver for a cluster record: the credentials are opened through the secret store, and the
driver's :class:`~deskpool.drivers.DriverContext` gets a Redis-backed shared state namespaced
for the cluster (``<KVSTORE_KEY_PREFIX>driver:<cluster id>:``) and :class:`DriverCallMetrics`
as its observer, so every driver call is counted and timed in ``/metrics``.

A record may name a driver whose package is not installed (removed, or disabled with
``PLUGINS_DISABLED``): it is listed all the same, with ``driver_status`` ``not_installed``,
and whatever needs the driver answers :class:`DriverNotInstalled` (503 ``driver_not_installed``)
instead of failing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from redis.exceptions import RedisError

from deskpool.clusters.repository import (
    ClusterRecord,
    ConnectionSettings,
    load_credentials,
    load_secret_options,
)
from deskpool.clusters.shared_state import RedisSharedState
from deskpool.drivers import (
    ClusterConnection,
    DriverCall,
    DriverConfigurationError,
    DriverContext,
    DriverError,
    HypervisorDriver,
    VmEventSink,
    merge_secret_options,
    secret_option_pointers,
)
from deskpool.errors import ServiceUnavailable
from deskpool.registry import Registry
from deskpool.secrets import SecretStore

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: ``driver_status`` of a cluster whose driver is registered in this process.
INSTALLED = "installed"
#: ``driver_status`` of a cluster whose driver is not.
NOT_INSTALLED = "not_installed"

#: Latency buckets of driver calls: from a cached read to a slow full clone.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class DriverNotInstalled(ServiceUnavailable):
    """The cluster's driver is not installed in this process (503 ``driver_not_installed``).

    The problem lists the installed drivers in ``installed``.
    """

    code = "driver_not_installed"
    title = "The cluster's hypervisor driver is not installed"

    def __init__(self, driver: str, installed: list[str]) -> None:
        super().__init__(
            f"The cluster uses the hypervisor driver {driver!r}, which is not installed here "
            f"(installed: {', '.join(installed) or 'none'}). Install the driver's package, or "
            "remove it from PLUGINS_DISABLED, and restart.",
            extra={"driver": driver, "installed": installed},
        )
        self.driver = driver


class DriverCallMetrics:
    """The observer of every driver call: a counter and a latency histogram.

    ``deskpool_driver_calls_total`` and ``deskpool_driver_call_duration_seconds``, both by
    ``driver``, ``operation`` and ``outcome`` (``ok``, ``cancelled``, or the error's code).

    :param registry: where to register them (the runtime's, served at ``/metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["driver", "operation", "outcome"]
        self.calls = Counter(
            "deskpool_driver_calls",
            "Hypervisor driver calls, by driver, operation and outcome.",
            labels,
            registry=registry,
        )
        self.duration = Histogram(
            "deskpool_driver_call_duration_seconds",
            "Time hypervisor driver calls took, by driver, operation and outcome.",
            labels,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )

    def driver_call_finished(self, call: DriverCall) -> None:
        """Count and time ``call``."""
        labels = (call.driver, call.operation, call.outcome)
        self.calls.labels(*labels).inc()
        self.duration.labels(*labels).observe(call.seconds)


class DriverManager:
    """The hypervisor drivers of one runtime, and drivers built for cluster records.

    Make it with :func:`driver_manager_for`, never directly twice for one runtime (its metrics
    are registered on the runtime's registry).

    :param runtime: an opened runtime (its database, key-value store and plugins are used).
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.metrics = DriverCallMetrics(runtime.metrics)
        self._registry: Registry[type[HypervisorDriver]] | None = None
        self._secret_store: SecretStore | None = None

    # -- what is installed

    @property
    def registry(self) -> Registry[type[HypervisorDriver]]:
        """The drivers registered through ``deskpool_register_hypervisor_drivers``."""
        if self._registry is None:
            self._registry = self.runtime.plugins.hypervisor_drivers()
        return self._registry

    def installed(self) -> list[str]:
        """Names of the installed drivers, sorted."""
        return self.registry.names()

    def is_installed(self, driver: str) -> bool:
        """Whether a driver named ``driver`` is installed."""
        return driver in self.registry

    def status_of(self, driver: str) -> str:
        """``installed`` or ``not_installed``."""
        return INSTALLED if self.is_installed(driver) else NOT_INSTALLED

    def driver_class(self, driver: str) -> type[HypervisorDriver]:
        """The class registered as ``driver``.

        :raises DriverNotInstalled: none is.
        """
        if driver not in self.registry:
            raise DriverNotInstalled(driver, self.installed())
        found = self.registry.get(driver)
        if not (isinstance(found, type) and issubclass(found, HypervisorDriver)):
            log.error(
                "the hypervisor driver %r is registered as %r, not a driver class", driver, found
            )
            raise DriverNotInstalled(driver, self.installed())
        return found

    # -- building drivers

    @property
    def secret_store(self) -> SecretStore:
        """The secret store chosen by ``SECRET_STORE`` (built once)."""
        if self._secret_store is None:
            self._secret_store = self.runtime.secret_store
        return self._secret_store

    def shared_state_prefix(self, cluster_id: uuid.UUID | str) -> str:
        """The key prefix of a cluster's driver state in the key-value store."""
        return f"{self.runtime.config['KVSTORE_KEY_PREFIX']}driver:{cluster_id}:"

    def context_for(
        self, cluster_id: uuid.UUID | str, events: VmEventSink | None = None
    ) -> DriverContext:
        """The driver context of a cluster: shared state, id, metrics observer, event sink.

        ``events`` is where a driver reporting VM events sends them (:mod:`deskpool.vm_events`
        builds its watchers' drivers with one; other drivers are built without).
        """
        state = RedisSharedState(self.runtime.kv, self.shared_state_prefix(cluster_id))
        return DriverContext(
            shared_state=state, cluster_id=str(cluster_id), observer=self.metrics, events=events
        )

    def build(
        self,
        driver: str,
        cluster_id: uuid.UUID | str,
        settings: ConnectionSettings,
        credentials: Mapping[str, str],
        secret_options: Mapping[str, Any] | None = None,
        events: VmEventSink | None = None,
    ) -> HypervisorDriver:
        """A driver for these settings and credentials (no I/O; close it when done).

        ``secret_options`` (JSON pointer -> value) go back into the options the driver reads
        (:func:`deskpool_driver_api.merge_secret_options`); the connection's ``repr`` hides
        every value the driver declares secret.

        Building one and closing it is how a driver checks settings and credentials without
        connecting.

        :raises DriverNotInstalled: ``driver`` is not installed.
        :raises DriverConfigurationError: the driver refuses the settings or credentials.
        """
        driver_class = self.driver_class(driver)
        connection = ClusterConnection(
            endpoint=settings.endpoint,
            credentials=credentials,
            tls_verify=settings.tls_verify,
            ca_cert=settings.ca_certificate,
            fingerprint=settings.fingerprint,
            options=merge_secret_options(settings.options, secret_options or {}),
            secret_options=secret_option_pointers(driver_class.connection_fields),
        )
        context = self.context_for(cluster_id, events)
        try:
            return driver_class(connection, context)
        except DriverError:
            raise
        except (ValueError, TypeError, KeyError) as error:
            # The contract says DriverConfigurationError; the message is not repeated since a
            # driver outside the contract may have put a credential in it.
            raise DriverConfigurationError(
                f"the {driver} driver refused the connection settings ({type(error).__name__})"
            ) from None

    async def driver_for(
        self, record: ClusterRecord, events: VmEventSink | None = None
    ) -> HypervisorDriver:
        """A driver for a stored cluster, its credentials opened (the caller closes it).

        ``events`` receives the VM events of a driver that reports them, once its
        ``watch_events`` was called (:mod:`deskpool.vm_events`).

        :raises DriverNotInstalled: the record's driver is not installed.
        :raises DriverConfigurationError: the driver refuses the stored settings.
        :raises SecretDecryptionFailed: the stored credentials do not open.
        :raises SecretsUnavailable: credentials are stored and no master key is configured.
        """
        self.driver_class(record.driver)  # refuse before decrypting anything
        credentials: dict[str, str] = {}
        if record.credentials.is_set:
            credentials = await load_credentials(self.runtime.db, self.secret_store, record.id)
        secret_options: dict[str, Any] = {}
        if record.secret_options.is_set:
            secret_options = await load_secret_options(
                self.runtime.db, self.secret_store, record.id
            )
        return self.build(
            record.driver, record.id, record.settings, credentials, secret_options, events
        )

    @asynccontextmanager
    async def open(self, record: ClusterRecord) -> AsyncIterator[HypervisorDriver]:
        """``async with manager.open(record) as driver:``, closed when the block ends."""
        driver = await self.driver_for(record)
        try:
            yield driver
        finally:
            await driver.close()

    async def forget_shared_state(self, cluster_id: uuid.UUID | str) -> int:
        """Delete a deleted cluster's driver state from the key-value store (best effort).

        :returns: how many keys were deleted.
        """
        pattern = _glob_escape(self.shared_state_prefix(cluster_id)) + "*"
        deleted = 0
        try:
            batch: list[Any] = []
            async for key in self.runtime.kv.scan_iter(match=pattern, count=500):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += await self.runtime.kv.delete(*batch)
                    batch = []
            if batch:
                deleted += await self.runtime.kv.delete(*batch)
        except (RedisError, OSError) as error:
            log.warning("could not delete the driver state of cluster %s: %s", cluster_id, error)
        return deleted


def _glob_escape(text: str) -> str:
    """``text`` with Redis glob characters escaped, to match it literally in ``SCAN MATCH``."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def driver_manager_for(runtime: Runtime) -> DriverManager:
    """The driver manager of ``runtime`` (one per runtime: its metrics are registered once)."""
    return runtime.drivers
