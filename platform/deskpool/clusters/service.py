"""Use cases of the cluster aggregate, one function each: what the API, the CLI and plugins call.

Each change validates, changes and records its audit event through the :class:`Actor` in one
transaction, so a request either happens whole or not at all. Changes take the members of a
create or change request as the API's schemas load them (``ClusterCreateSchema``,
``ClusterChangeSchema``): a caller outside the API passes the same members. The driver checks
new settings and credentials before anything is stored, first against the connection fields
it declares (a mismatch is a 422 pointing at the member); credentials never reach the audit
trail. The option values a driver declares secret (contract 0.4) arrive among the options and
are sealed apart from them like credentials (:func:`_split_options`); a change that gives the
options again keeps a stored secret value it does not name (the API never shows it back), and
one given as ``null`` is removed. Reads that ask the cluster itself (a check, its nodes, its
templates) wait at most :data:`DRIVER_CALL_TIMEOUT` seconds.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from deskpool.actor import Actor
from deskpool.clusters import repository
from deskpool.clusters.commands import ChangeCluster, CreateCluster
from deskpool.clusters.drivers import DriverManager, driver_manager_for
from deskpool.clusters.repository import ClusterRecord
from deskpool.drivers import (
    ConnectionField,
    DriverError,
    HypervisorDriver,
    Node,
    Template,
    connection_problems,
    deadline_after,
    merge_secret_options,
    split_secret_options,
)
from deskpool.errors import (
    Conflict,
    DeskpoolError,
    LocatedFieldError,
    ValidationFailed,
    found,
)
from deskpool.secrets import SecretValue

if TYPE_CHECKING:
    from deskpool.runtime import Runtime
from deskpool.unset import UNSET

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a request waits for the cluster (a check, a list of nodes or templates).
DRIVER_CALL_TIMEOUT = 30.0


@dataclass(frozen=True)
class DriverProblem:
    """An error a driver reported while checking a cluster."""

    code: str
    title: str
    detail: str
    retryable: bool

    @property
    def text(self) -> str:
        """``<code>: <detail>``, as text PostgreSQL stores (the hypervisor's may not be)."""
        text = f"{self.code}: {self.detail}".replace("\x00", "")
        return text.encode("utf-8", "replace").decode()


@dataclass(frozen=True)
class CheckResult:
    """The outcome of a connection check (kept on the record as its ``last_check_*``)."""

    ok: bool
    checked_at: datetime
    duration_seconds: float
    product: str | None = None
    version: str | None = None
    cluster_name: str | None = None
    details: Mapping[str, str] | None = None
    error: DriverProblem | None = None


@dataclass(frozen=True)
class InstalledDriver:
    """A hypervisor driver installed here, and the connection fields it declares."""

    name: str
    title: str
    endpoint_help: str
    fields: tuple[ConnectionField, ...]


@dataclass(frozen=True)
class Census:
    """How many clusters each driver serves, and the drivers installed here."""

    by_driver: Mapping[str, int]
    installed: list[str]

    @property
    def connected(self) -> bool:
        """Whether a cluster is connected with an installed driver."""
        return any(driver in self.installed for driver in self.by_driver)


def _plain(credentials: Mapping[str, SecretValue] | None) -> dict[str, str]:
    return {key: value.reveal() for key, value in (credentials or {}).items()}


def _declared(manager: DriverManager, driver: str) -> tuple[ConnectionField, ...]:
    """The connection fields ``driver`` declares; none when it is not installed."""
    if not manager.is_installed(driver):
        return ()
    return tuple(manager.driver_class(driver).connection_fields)


def _split_options(
    declared: tuple[ConnectionField, ...],
    options: Mapping[str, Any],
    stored: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What to store of ``options``: the plain options, and the secret values by pointer.

    ``stored`` (a change) are the secret values stored now: those ``options`` do not name are
    kept when their option is still there; a value given as ``None`` is removed.
    """
    plain, given = split_secret_options(declared, options)
    secrets = {
        pointer: value
        for pointer, value in (stored or {}).items()
        if pointer not in given and merge_secret_options(plain, {pointer: value}) != plain
    }
    secrets.update({pointer: value for pointer, value in given.items() if value is not None})
    return plain, secrets


def _check_declared(
    manager: DriverManager,
    driver: str,
    credentials: Mapping[str, str] | None,
    options: Mapping[str, Any] | None,
) -> None:
    """Refuse credentials and options that do not match what ``driver`` declares.

    ``None`` leaves that side unchecked (a change that keeps it).

    :raises ValidationFailed: each problem located at its member (``/credentials/token_id``).
    """
    declared = manager.driver_class(driver).connection_fields
    problems = connection_problems(declared, credentials, options)
    if problems:
        raise ValidationFailed(
            [LocatedFieldError(problem.pointer, problem.message) for problem in problems],
            f"The credentials and options do not match the fields the {driver} driver declares.",
        )


# ---------------------------------------------------------------------------------- reads


def installed_drivers(runtime: Runtime) -> list[InstalledDriver]:
    """The drivers installed here, in name order, with their declared connection fields."""
    manager = driver_manager_for(runtime)
    drivers = []
    for name in manager.installed():
        try:
            driver_class = manager.driver_class(name)
        except DeskpoolError:
            continue  # registered as something else than a driver class (logged)
        drivers.append(
            InstalledDriver(
                name=name,
                title=driver_class.title or name,
                endpoint_help=driver_class.endpoint_help,
                fields=tuple(driver_class.connection_fields),
            )
        )
    return drivers


async def census(runtime: Runtime) -> Census:
    """How many clusters each driver serves, and which drivers are installed."""
    counts = await repository.clusters_by_driver(runtime.db)
    return Census(counts, driver_manager_for(runtime).installed())


async def list_clusters(
    runtime: Runtime, *, limit: int, after_name: str | None = None, driver: str | None = None
) -> list[ClusterRecord]:
    """Up to ``limit`` clusters in name order, after ``after_name``, of ``driver`` if given."""
    return await repository.list_clusters(
        runtime.db, limit=limit, after_name=after_name, driver=driver
    )


async def get_cluster(runtime: Runtime, cluster_id: uuid.UUID) -> ClusterRecord:
    """The cluster ``cluster_id``.

    :raises NotFound: there is none.
    """
    record = found(await repository.get_cluster(runtime.db, cluster_id), "cluster", cluster_id)
    return record


async def _ask(
    runtime: Runtime,
    cluster_id: uuid.UUID,
    question: Callable[[HypervisorDriver, float], Awaitable[T]],
) -> T:
    """Ask the cluster's driver ``question`` (with its deadline), now.

    :raises NotFound: there is no such cluster.
    :raises DriverError: the cluster answered with an error or not in time.
    """
    record = await get_cluster(runtime, cluster_id)
    async with driver_manager_for(runtime).open(record) as driver:
        return await question(driver, deadline_after(DRIVER_CALL_TIMEOUT))


async def list_nodes(runtime: Runtime, cluster_id: uuid.UUID) -> list[Node]:
    """The nodes of the cluster, read from it now (see :func:`_ask`)."""
    return await _ask(
        runtime, cluster_id, lambda driver, deadline: driver.list_nodes(deadline=deadline)
    )


async def list_templates(runtime: Runtime, cluster_id: uuid.UUID) -> list[Template]:
    """The templates of the cluster, read from it now (see :func:`_ask`)."""
    return await _ask(
        runtime, cluster_id, lambda driver, deadline: driver.list_templates(deadline=deadline)
    )


# ---------------------------------------------------------------------------------- changes


async def create_cluster(runtime: Runtime, actor: Actor, command: CreateCluster) -> ClusterRecord:
    """Connect a cluster, once its driver accepts the settings.

    :raises ValidationFailed: the driver is not installed (the installed ones in ``installed``),
        or the credentials and options do not match the fields it declares.
    :raises DriverConfigurationError: the driver refuses the settings or credentials.
    :raises ClusterNameTaken: the name is in use.
    :raises SecretsUnavailable: credentials are given and no master key is configured.
    """
    manager = driver_manager_for(runtime)
    driver = command.driver
    if not manager.is_installed(driver):
        installed = manager.installed()
        error = ValidationFailed(
            [
                LocatedFieldError(
                    "/driver",
                    f"No hypervisor driver named {driver!r} is installed; installed: "
                    f"{', '.join(installed) or 'none'}.",
                )
            ]
        )
        error.extra["installed"] = installed
        raise error
    cluster_id = uuid.uuid4()
    settings = command.settings()
    credentials = command.credentials
    plain, secret_options = _split_options(_declared(manager, driver), settings.options)
    settings = replace(settings, options=plain)
    _check_declared(
        manager, driver, _plain(credentials), merge_secret_options(plain, secret_options)
    )
    # Building a driver checks the settings and credentials, without connecting.
    await manager.build(driver, cluster_id, settings, _plain(credentials), secret_options).close()
    async with runtime.db.acquire() as connection, connection.transaction():
        await repository.insert_cluster(
            connection, cluster_id=cluster_id, name=command.name, driver=driver, settings=settings
        )
        if credentials:
            await repository.store_credentials(
                connection, manager.secret_store, cluster_id, credentials
            )
        if secret_options:
            await repository.store_secret_options(
                connection, manager.secret_store, cluster_id, secret_options
            )
        await actor.record(
            connection,
            "cluster.create",
            "clusters",
            str(cluster_id),
            {
                "name": command.name,
                "driver": driver,
                "endpoint": settings.endpoint,
                "credentials_set": bool(credentials),
                "secret_options": sorted(secret_options),
            },
        )
        record = await repository.get_cluster(connection, cluster_id)
    assert record is not None
    return record


async def change_cluster(
    runtime: Runtime, actor: Actor, cluster_id: uuid.UUID, change: ChangeCluster
) -> ClusterRecord:
    """Change a cluster; what the change leaves :data:`~deskpool.unset.UNSET` stays as it is.

    ``tls`` members replace the stored ones one by one, ``options`` and ``credentials`` whole;
    ``credentials: None`` removes them. Secret option values the new ``options`` do not name
    are kept (a ``null`` one is removed), see :func:`_split_options`. A change to how the
    cluster is reached is checked by its driver first, when the driver is installed: against
    the fields it declares, then by building it.

    :raises NotFound: there is no such cluster.
    :raises ValidationFailed: new credentials or options do not match the declared fields.
    :raises DriverConfigurationError: the driver refuses the new settings or credentials.
    :raises ClusterNameTaken: the new name is in use.
    """
    manager = driver_manager_for(runtime)
    new_credentials = None if change.credentials is UNSET else change.credentials
    replaces_credentials = change.credentials is not UNSET
    async with runtime.db.acquire() as connection, connection.transaction():
        record = found(
            await repository.get_cluster(connection, cluster_id, for_update=True),
            "cluster",
            cluster_id,
        )
        stored_secrets: dict[str, Any] = {}
        if record.secret_options.is_set:
            stored_secrets = await repository.load_secret_options(
                connection, manager.secret_store, cluster_id
            )
        settings = change.applied_to(record.settings)
        secret_options = stored_secrets
        if change.options is not UNSET:
            plain, secret_options = _split_options(
                _declared(manager, record.driver), settings.options, stored_secrets
            )
            settings = replace(settings, options=plain)
        reach_changed = (
            replaces_credentials or settings != record.settings or secret_options != stored_secrets
        )
        if reach_changed and manager.is_installed(record.driver):
            _check_declared(
                manager,
                record.driver,
                _plain(new_credentials) if replaces_credentials else None,
                merge_secret_options(settings.options, secret_options)
                if change.options is not UNSET
                else None,
            )
            if replaces_credentials:
                credentials = _plain(new_credentials)
            elif record.credentials.is_set:
                credentials = await repository.load_credentials(
                    connection, manager.secret_store, cluster_id
                )
            else:
                credentials = {}
            await manager.build(
                record.driver, cluster_id, settings, credentials, secret_options
            ).close()
        await repository.update_cluster(
            connection,
            cluster_id,
            name=record.name if change.name is UNSET else change.name,
            settings=settings,
        )
        if secret_options != stored_secrets:
            await repository.store_secret_options(
                connection, manager.secret_store, cluster_id, secret_options
            )
        if replaces_credentials:
            if new_credentials:
                await repository.store_credentials(
                    connection, manager.secret_store, cluster_id, new_credentials
                )
            else:
                await repository.delete_credentials(connection, cluster_id)
        await actor.record(
            connection,
            "cluster.update",
            "clusters",
            str(cluster_id),
            {
                "fields": sorted(change.members),
                "credentials": (
                    ("replaced" if new_credentials else "removed")
                    if replaces_credentials
                    else "unchanged"
                ),
                "secret_options": sorted(secret_options),
            },
        )
        updated = await repository.get_cluster(connection, cluster_id)
    assert updated is not None
    return updated


#: The actor of sealing secret option values found in plain text (stored before contract 0.4).
SEAL_ACTOR = Actor.system("system:seal-secret-options")


async def seal_plain_secret_options(runtime: Runtime) -> int:
    """Seal the secret option values stored in plain text, from before the driver contract 0.4.

    Run at the API's start: every cluster whose stored ``options`` hold a value its (installed)
    driver now declares secret has it moved into its sealed secret options (a value sealed
    since wins over the plain one), one transaction and one audit event
    (``cluster.secret_options_sealed``) per cluster. A SQL migration cannot do this: sealing
    needs the secret store's key, which the database never sees. Until it has run, responses
    leave such values out all the same (:func:`visible_options`).

    :returns: how many clusters were changed.
    :raises SecretsUnavailable: such a value is found and no master key is configured.
    """
    manager = driver_manager_for(runtime)
    sealed = 0
    for cluster_id in await repository.cluster_ids(runtime.db):
        async with runtime.db.acquire() as connection, connection.transaction():
            record = await repository.get_cluster(connection, cluster_id, for_update=True)
            if record is None:
                continue
            plain, found_plain = split_secret_options(
                _declared(manager, record.driver), record.settings.options
            )
            found_plain = {key: value for key, value in found_plain.items() if value is not None}
            if not found_plain:
                continue
            stored: dict[str, Any] = {}
            if record.secret_options.is_set:
                stored = await repository.load_secret_options(
                    connection, manager.secret_store, cluster_id
                )
            await repository.store_secret_options(
                connection, manager.secret_store, cluster_id, {**found_plain, **stored}
            )
            await repository.update_cluster(
                connection,
                cluster_id,
                name=record.name,
                settings=replace(record.settings, options=plain),
            )
            await SEAL_ACTOR.record(
                connection,
                "cluster.secret_options_sealed",
                "clusters",
                str(cluster_id),
                {"secret_options": sorted(found_plain)},
            )
            sealed += 1
    return sealed


def visible_options(manager: DriverManager, record: ClusterRecord) -> dict[str, Any]:
    """The options of ``record`` that may be shown: never a value its driver declares secret."""
    plain, _ = split_secret_options(_declared(manager, record.driver), record.settings.options)
    return plain


async def delete_cluster(runtime: Runtime, actor: Actor, cluster_id: uuid.UUID) -> None:
    """Delete a cluster connection and its credentials (not its virtual machines).

    :raises NotFound: there is no such cluster.
    :raises Conflict: ``cluster_in_use``, pools provision on it (their count in ``pools``).
    """
    async with runtime.db.acquire() as connection, connection.transaction():
        record = found(
            await repository.get_cluster(connection, cluster_id, for_update=True),
            "cluster",
            cluster_id,
        )
        in_use = await repository.pools_using_cluster(connection, cluster_id)
        if in_use:
            raise Conflict(
                f"{in_use} pool(s) provision on the cluster {record.name!r}; delete them or "
                "move them to another cluster first.",
                code="cluster_in_use",
                extra={"pools": in_use},
            )
        await repository.delete_cluster(connection, cluster_id)
        await actor.record(
            connection, "cluster.delete", "clusters", str(cluster_id), {"name": record.name}
        )
    await driver_manager_for(runtime).forget_shared_state(cluster_id)


async def _connect(manager: DriverManager, record: ClusterRecord) -> dict[str, Any]:
    """What checking ``record``'s connection found, or the driver's problem under ``error``."""
    try:
        async with manager.open(record) as driver:
            info = await driver.check_connection(deadline=deadline_after(DRIVER_CALL_TIMEOUT))
    except DriverError as error:
        return {
            "ok": False,
            "error": DriverProblem(error.code, error.title, error.detail, error.retryable),
        }
    except DeskpoolError:
        raise  # the platform's own problems (secrets), not the cluster's
    except Exception as error:  # a driver outside its contract: report, never a 500
        log.exception("the %s driver failed checking cluster %s", record.driver, record.id)
        return {
            "ok": False,
            "error": DriverProblem(
                "driver_unexpected_error",
                "The hypervisor driver failed unexpectedly",
                f"The {record.driver} driver raised {type(error).__name__}; see the log.",
                False,
            ),
        }
    return {
        "ok": True,
        "product": info.product,
        "version": info.version,
        "cluster_name": info.cluster_name,
        "details": dict(info.details),
    }


async def check_cluster(runtime: Runtime, actor: Actor, cluster_id: uuid.UUID) -> CheckResult:
    """Connect with the cluster's driver and record the outcome (a driver's error included).

    :raises NotFound: there is no such cluster.
    :raises DriverNotInstalled: the cluster's driver is not installed.
    """
    manager = driver_manager_for(runtime)
    record = await get_cluster(runtime, cluster_id)
    manager.driver_class(record.driver)
    started = time.monotonic()
    outcome = await _connect(manager, record)
    duration = round(time.monotonic() - started, 6)
    failure: DriverProblem | None = outcome.get("error")
    async with runtime.db.acquire() as connection, connection.transaction():
        checked_at = found(
            await repository.record_check(
                connection,
                record.id,
                ok=outcome["ok"],
                error=None if failure is None else failure.text,
            ),
            "cluster",
            record.id,
        )
        details: dict[str, Any] = (
            {"product": outcome.get("product"), "version": outcome.get("version")}
            if failure is None
            else {"error": failure.code}
        )
        await actor.record(
            connection,
            "cluster.check",
            "clusters",
            str(record.id),
            details,
            outcome="success" if failure is None else "failure",
        )
    return CheckResult(checked_at=checked_at, duration_seconds=duration, **outcome)
