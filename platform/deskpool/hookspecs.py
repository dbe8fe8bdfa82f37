"""The plugin contract: every hook deskpool calls, in one module.

Each hook is a typed, empty function whose docstring is its reference documentation (the hook
reference in ``docs/reference/hooks.md`` is generated from this module, and a test fails when a
hook is undocumented). Every hook here is called by the host: a test plugin implementing all of
them (``tests/integration/plugins/test_hooks_dispatched.py``) proves each is dispatched and its
result used, and a hook added without such a test fails there. Plugins implement hooks with
:data:`deskpool.plugins.hookimpl`; a plugin is a module (or an instance) named by an entry point
in one of deskpool's entry-point groups.

Hooks whose name starts with ``deskpool_register_`` receive a registry and add to it. Hooks may
be ``async def`` where noted: the host awaits their results through one helper.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from deskpool.api.routes import RouteTable
    from deskpool.auth import AuthProviderFactory
    from deskpool.config import Config, SettingRegistry
    from deskpool.jobs.model import RegisteredJobKind
    from deskpool.jobs.periodic import PeriodicTask
    from deskpool.licensing.reporting import LicenseReporterFactory
    from deskpool.recordings.stores import RecordingStoreFactory
    from deskpool.registry import Registry
    from deskpool.runtime import ComponentFactory, ReadinessCheck, Runtime
    from deskpool.secrets import SecretStoreFactory
    from deskpool_driver_api import HypervisorDriver

hookspec = pluggy.HookspecMarker("deskpool")

# --------------------------------------------------------------------------------- lifecycle


@hookspec
def deskpool_configure(config: Config) -> None:
    """Inspect the loaded configuration, once, before anything starts.

    Raise :class:`deskpool.errors.StartupError` to refuse to start with a clear message
    (for example, a secret store whose key is invalid).

    :param config: the frozen configuration of the process.
    """


@hookspec
def deskpool_startup(runtime: Runtime) -> Awaitable[None] | None:
    """Acquire what the plugin needs once the database and key-value store are connected.

    May be ``async``. Called after migrations are checked and before any component starts.
    Raise :class:`deskpool.errors.StartupError` to refuse to start.

    :param runtime: the process runtime (configuration, database pool, key-value client).
    """


@hookspec
def deskpool_shutdown(runtime: Runtime) -> Awaitable[None] | None:
    """Release what :func:`deskpool_startup` acquired. May be ``async``.

    Called after every component has stopped, in reverse registration order.

    :param runtime: the process runtime.
    """


# ----------------------------------------------------------------------------- configuration


@hookspec
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the environment variables the plugin reads.

    Declared settings are read with the platform's own into the one configuration structure,
    validated together, and listed in the generated configuration reference. Components
    declare theirs here too: a process reads the settings of the plugins it loads.

    :param registry: call ``registry.add(Setting(...))`` once per variable, or
        ``registry.section(title, owner=...).add(name, parse, default, description, ...)``
        for several of one reference section.
    """


# -------------------------------------------------------------------------------- components


@hookspec
def deskpool_register_components(registry: Registry[ComponentFactory]) -> None:
    """Register process components (``api``, ``worker``, ``gateway``, ``web``...).

    ``deskpool run NAME...`` starts the components registered under those names.

    :param registry: ``registry.add(name, factory)`` where ``factory(runtime)`` returns a
        :class:`deskpool.runtime.Component`.
    """


@hookspec
def deskpool_readiness_checks(runtime: Runtime) -> list[ReadinessCheck]:
    """Return extra readiness checks reported by ``/readyz``.

    :param runtime: the process runtime.
    :returns: a list of :class:`deskpool.runtime.ReadinessCheck`.
    """
    raise NotImplementedError


@hookspec
def deskpool_register_routes(routes: RouteTable) -> None:
    """Add REST operations to the API's route table.

    Every operation declares its permission, schemas and responses there, so it appears in the
    OpenAPI document and is protected like the built-in ones. The auth provider plugin declares
    the document's security schemes there too (``routes.security_scheme(name, scheme)``), and
    how the introduction describes authenticating (``routes.describe_authentication(...)``).

    :param routes: the route table of the API.
    """


# -------------------------------------------------------------------------------------- auth


@hookspec
def deskpool_register_auth_providers(registry: Registry[AuthProviderFactory]) -> None:
    """Register auth providers (the ``AUTH_PROVIDER`` setting chooses one).

    :param registry: ``registry.add(name, factory)`` where ``factory(config)`` returns a
        :class:`deskpool.auth.AuthProvider` (:data:`deskpool.auth.AuthProviderFactory`).
    """


# ----------------------------------------------------------------------------------- secrets


@hookspec
def deskpool_register_secret_stores(registry: Registry[SecretStoreFactory]) -> None:
    """Register secret stores (the ``SECRET_STORE`` setting chooses one).

    :param registry: ``registry.add(name, factory)`` where ``factory(config)`` returns a
        :class:`deskpool.secrets.SecretStore` (:data:`deskpool.secrets.SecretStoreFactory`).
    """


@hookspec
def deskpool_register_recording_stores(registry: Registry[RecordingStoreFactory]) -> None:
    """Register session recording stores (the ``RECORDING_STORE`` setting chooses one).

    A store keeps the chunks the gateway records, sealed (never plain text at rest), and gives
    them back opened to the API's download.

    :param registry: ``registry.add(name, factory)`` where ``factory(runtime)`` returns a
        :class:`deskpool.recordings.stores.RecordingStore`
        (:data:`deskpool.recordings.stores.RecordingStoreFactory`).
    """


# -------------------------------------------------------------------------------- hypervisor


@hookspec
def deskpool_register_hypervisor_drivers(registry: Registry[type[HypervisorDriver]]) -> None:
    """Register hypervisor drivers; each cluster record names the driver it uses.

    :param registry: ``registry.add(name, driver_class)`` where ``driver_class`` derives from
        :class:`deskpool_driver_api.HypervisorDriver`.
    """


# -------------------------------------------------------------------------------------- jobs


@hookspec
def deskpool_register_job_kinds(registry: Registry[RegisteredJobKind]) -> None:
    """Register job kinds the worker runs.

    A handler receives a :class:`deskpool.jobs.JobContext` (the job, the runtime, a deadline,
    ``heartbeat()``); it runs at least once, so it must be idempotent. Raise
    :class:`deskpool.jobs.PermanentJobFailure` for a failure that no retry can fix.

    :param registry: ``registry.add(kind, handler)`` where ``handler`` is an async callable
        taking the job context, or a :class:`deskpool.jobs.JobKind` naming the handler with
        its retry policy and timeout (:data:`deskpool.jobs.model.RegisteredJobKind`).
    """


@hookspec
def deskpool_register_periodic_tasks(registry: Registry[PeriodicTask]) -> None:
    """Register periodic tasks; each runs once per interval across the whole deployment.

    Any number of workers may run; a run is claimed in the database, so two workers never run
    the same task in the same interval and runs never overlap.

    :param registry: ``registry.add(name, task)`` where ``task`` is a
        :class:`deskpool.jobs.PeriodicTask` (its interval setting and an async ``run(context)``).
    """


# --------------------------------------------------------------------------------- licensing


@hookspec
def deskpool_register_license_reporters(registry: Registry[LicenseReporterFactory]) -> None:
    """Register licensing reporters (the ``LICENSE_REPORTER`` setting chooses one).

    The worker sends activation reports through the chosen reporter when a licensed edition is
    in force (never for the free edition); the platform builds the payload and decides when.

    :param registry: ``registry.add(name, factory)`` where ``factory(config)`` returns a
        :class:`deskpool.licensing.reporting.LicenseReporter` (``enabled``, and ``async
        send(report)`` raising ``ReportFailed`` when the report was not accepted;
        :data:`deskpool.licensing.reporting.LicenseReporterFactory`).
    """
