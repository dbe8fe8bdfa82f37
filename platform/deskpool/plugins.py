"""The plugin host: discovery with stevedore, dispatch with pluggy, and a typed front.

Plugins are found through entry points in the groups of :data:`ENTRY_POINT_GROUPS`. stevedore
imports the chosen ones (only what is enabled is loaded); pluggy registers each loaded module and
dispatches hooks. :class:`PluginHost` is the typed front: one method per hook, so the rest of the
code never calls ``pm.hook.x(...)`` untyped. Build it with :func:`load_plugins`; nothing here runs
at import time.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy
from stevedore import NamedExtensionManager

from deskpool import hookspecs
from deskpool.area_settings import declare_area_settings
from deskpool.config import SettingRegistry, declare_core_settings, parse_list
from deskpool.errors import PluginLoadError, PluginNotFound
from deskpool.listener import declare_listener_settings
from deskpool.registry import Registry

if TYPE_CHECKING:
    from deskpool.api.routes import RouteTable
    from deskpool.auth import AuthProviderFactory
    from deskpool.config import Config, Setting
    from deskpool.jobs.model import RegisteredJobKind
    from deskpool.jobs.periodic import PeriodicTask
    from deskpool.licensing.reporting import LicenseReporterFactory
    from deskpool.recordings.stores import RecordingStoreFactory
    from deskpool.runtime import ComponentFactory, ReadinessCheck, Runtime
    from deskpool.secrets import SecretStoreFactory
    from deskpool_driver_api import HypervisorDriver


T = TypeVar("T")

#: The marker plugins decorate their hook implementations with.
hookimpl = pluggy.HookimplMarker("deskpool")

#: Short group names (as ``PLUGINS_DISABLED`` and ``deskpool plugins`` write them) and the
#: entry-point groups they stand for.
ENTRY_POINT_GROUPS: dict[str, str] = {
    "components": "deskpool.components",
    "auth_providers": "deskpool.auth_providers",
    "secret_stores": "deskpool.secret_stores",
    "license_reporters": "deskpool.license_reporters",
    "recording_stores": "deskpool.recording_stores",
    "hypervisor_drivers": "deskpool.hypervisor_drivers",
    "plugins": "deskpool.plugins",
}

#: Groups where one plugin is chosen by a setting, and that setting's name.
CHOSEN_BY_SETTING: dict[str, str] = {
    "auth_providers": "AUTH_PROVIDER",
    "secret_stores": "SECRET_STORE",
    "license_reporters": "LICENSE_REPORTER",
    "recording_stores": "RECORDING_STORE",
}

#: Single-choice groups whose chosen plugin may be missing without stopping the process: only a
#: process that records sessions needs a recording store, and it says so when it builds one
#: (:func:`deskpool.recordings.stores.build_recording_store`).
OPTIONAL_CHOICES = frozenset({"recording_stores"})

_SELECTION_DEFAULTS = {
    "AUTH_PROVIDER": "oidc",
    "SECRET_STORE": "envelope",
    "LICENSE_REPORTER": "http",
    "RECORDING_STORE": "files",
}


@dataclass(frozen=True)
class InstalledPlugin:
    """An entry point found in one of deskpool's groups, and whether this process loaded it."""

    group: str
    name: str
    target: str
    distribution: str
    version: str
    loaded: bool
    reason: str = ""


def installed_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """Every entry point installed in the entry-point group ``group`` (its full name)."""
    return sorted(importlib.metadata.entry_points(group=group), key=lambda ep: ep.name)


def _distribution_of(group: str, name: str) -> tuple[str, str]:
    """Name and version of the distribution that declares entry point ``name`` in ``group``."""
    for entry_point in importlib.metadata.entry_points(group=group, name=name):
        dist = entry_point.dist
        if dist is not None:
            return dist.metadata["Name"] or "?", dist.version
    return "?", "?"


def _is_disabled(short_group: str, name: str, disabled: Iterable[str]) -> bool:
    return any(item in (name, f"{short_group}:{name}") for item in disabled)


@dataclass
class PluginSelection:
    """Which entry points a process loads.

    :param components: component names to load; ``None`` loads every installed component.
    :param chosen: the provider chosen in each single-choice group (``AUTH_PROVIDER``...).
    :param disabled: names from ``PLUGINS_DISABLED`` (``name`` or ``group:name``).
    """

    components: Sequence[str] | None = None
    chosen: Mapping[str, str] = field(default_factory=dict)
    disabled: Sequence[str] = ()

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], components: Sequence[str] | None = None
    ) -> PluginSelection:
        """Read the plugin-choice settings, the only ones read before plugins are loaded."""
        chosen = {
            group: (environ.get(setting) or _SELECTION_DEFAULTS[setting]).strip()
            for group, setting in CHOSEN_BY_SETTING.items()
        }
        disabled = parse_list(environ.get("PLUGINS_DISABLED", ""))
        return cls(components=components, chosen=chosen, disabled=disabled)

    def wanted(self, short_group: str) -> list[str] | None:
        """The entry-point names to load from a group; ``None`` means all not disabled."""
        if short_group == "components":
            return list(self.components) if self.components is not None else None
        if short_group in CHOSEN_BY_SETTING:
            return [self.chosen[short_group]]
        return None


class PluginHost:
    """The typed front over the pluggy plugin manager: one method per hook.

    :param pm: a plugin manager with :mod:`deskpool.hookspecs` added and plugins registered.
    :param loaded: ``(short group, entry point name)`` of every plugin loaded from an entry point.
    """

    def __init__(self, pm: pluggy.PluginManager, loaded: Sequence[tuple[str, str]] = ()) -> None:
        self.pm = pm
        self.loaded = list(loaded)
        self._hook: Any = pm.hook

    # -- lifecycle
    def configure(self, config: Config) -> None:
        """Call ``deskpool_configure``."""
        self._hook.deskpool_configure(config=config)

    async def startup(self, runtime: Runtime) -> None:
        """Call and await ``deskpool_startup``."""
        await await_all(self._hook.deskpool_startup(runtime=runtime))

    async def shutdown(self, runtime: Runtime) -> None:
        """Call and await ``deskpool_shutdown``."""
        await await_all(self._hook.deskpool_shutdown(runtime=runtime))

    # -- configuration
    def settings(self) -> list[Setting]:
        """The core's and the platform areas' settings, then every plugin's declarations."""
        registry = SettingRegistry()
        declare_core_settings(registry)
        declare_listener_settings(registry)
        declare_area_settings(registry)
        self._hook.deskpool_declare_settings(registry=registry)
        return list(registry)

    # -- registries
    def _fill(self, registry: Registry[T], hook_name: str) -> Registry[T]:
        getattr(self._hook, hook_name)(registry=registry)
        return registry

    def components(self) -> Registry[ComponentFactory]:
        """Call ``deskpool_register_components``."""
        registry: Registry[ComponentFactory] = Registry("component")
        return self._fill(registry, "deskpool_register_components")

    def auth_providers(self) -> Registry[AuthProviderFactory]:
        """Call ``deskpool_register_auth_providers``."""
        registry: Registry[AuthProviderFactory] = Registry("auth provider")
        return self._fill(registry, "deskpool_register_auth_providers")

    def secret_stores(self) -> Registry[SecretStoreFactory]:
        """Call ``deskpool_register_secret_stores``."""
        registry: Registry[SecretStoreFactory] = Registry("secret store")
        return self._fill(registry, "deskpool_register_secret_stores")

    def recording_stores(self) -> Registry[RecordingStoreFactory]:
        """Call ``deskpool_register_recording_stores``."""
        registry: Registry[RecordingStoreFactory] = Registry("recording store")
        return self._fill(registry, "deskpool_register_recording_stores")

    def hypervisor_drivers(self) -> Registry[type[HypervisorDriver]]:
        """Call ``deskpool_register_hypervisor_drivers``."""
        registry: Registry[type[HypervisorDriver]] = Registry("hypervisor driver")
        return self._fill(registry, "deskpool_register_hypervisor_drivers")

    def license_reporters(self) -> Registry[LicenseReporterFactory]:
        """Call ``deskpool_register_license_reporters``."""
        registry: Registry[LicenseReporterFactory] = Registry("license reporter")
        return self._fill(registry, "deskpool_register_license_reporters")

    def job_kinds(self) -> Registry[RegisteredJobKind]:
        """Call ``deskpool_register_job_kinds``."""
        registry: Registry[RegisteredJobKind] = Registry("job kind")
        return self._fill(registry, "deskpool_register_job_kinds")

    def periodic_tasks(self) -> Registry[PeriodicTask]:
        """Call ``deskpool_register_periodic_tasks``."""
        registry: Registry[PeriodicTask] = Registry("periodic task")
        return self._fill(registry, "deskpool_register_periodic_tasks")

    def register_routes(self, routes: RouteTable) -> None:
        """Call ``deskpool_register_routes``."""
        self._hook.deskpool_register_routes(routes=routes)

    def readiness_checks(self, runtime: Runtime) -> list[ReadinessCheck]:
        """Call ``deskpool_readiness_checks`` and flatten the lists."""
        return [
            check
            for checks in self._hook.deskpool_readiness_checks(runtime=runtime)
            for check in checks
        ]


async def await_all(results: Iterable[Any]) -> list[Any]:
    """Await every awaitable among hook results (hooks may be async); return all results."""
    out = []
    for result in results:
        out.append(await result if inspect.isawaitable(result) else result)
    return out


def new_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with the hook specifications added and no plugin registered."""
    pm = pluggy.PluginManager("deskpool")
    pm.add_hookspecs(hookspecs)
    return pm


def load_plugins(selection: PluginSelection) -> PluginHost:
    """Discover and load the selected plugins of every group and register them with pluggy.

    :raises PluginLoadError: when an entry point fails to import, naming it, its distribution
        and how to disable it.
    :raises PluginNotFound: when a chosen plugin is not installed.
    """
    pm = new_plugin_manager()
    loaded: list[tuple[str, str]] = []
    failures: list[str] = []
    for short_group, group in ENTRY_POINT_GROUPS.items():
        wanted = selection.wanted(short_group)

        def on_failure(
            _manager: Any, entry_point: Any, error: BaseException, short_group: str = short_group
        ) -> None:
            failures.append(_load_failure_message(short_group, entry_point.name, error))

        if wanted is None:
            # Filter before loading: a disabled plugin is never imported.
            wanted = [
                ep.name
                for ep in installed_entry_points(group)
                if not _is_disabled(short_group, ep.name, selection.disabled)
            ]
        missing: list[str] = []

        def on_missing(names: Iterable[str], missing: list[str] = missing) -> None:
            missing.extend(names)

        manager = NamedExtensionManager(
            group,
            names=wanted,
            name_order=True,
            on_load_failure_callback=on_failure,
            on_missing_entrypoints_callback=on_missing,
        )
        extensions = list(manager)
        if short_group in OPTIONAL_CHOICES:
            missing.clear()
        for name in missing:
            if not any(f"plugin {name!r}" in message for message in failures):
                failures.append(_missing_message(short_group, group, name))
        for ext in extensions:
            if pm.is_registered(ext.plugin):
                loaded.append((short_group, ext.name))
                continue  # one module may serve several groups
            pm.register(ext.plugin, name=f"{short_group}:{ext.name}")
            loaded.append((short_group, ext.name))
    if failures:
        error_class = (
            PluginLoadError if any("failed to load" in f for f in failures) else PluginNotFound
        )
        raise error_class("\n".join(failures))
    return PluginHost(pm, loaded)


def _load_failure_message(short_group: str, name: str, error: BaseException) -> str:
    dist, version = _distribution_of(ENTRY_POINT_GROUPS[short_group], name)
    if short_group in CHOSEN_BY_SETTING:
        how = f"choose another with {CHOSEN_BY_SETTING[short_group]}"
    elif short_group == "components":
        how = f"do not name {name!r} in `deskpool run`"
    else:
        how = f"set PLUGINS_DISABLED={short_group}:{name} to run without it"
    return (
        f"plugin {name!r} (entry point group {ENTRY_POINT_GROUPS[short_group]}, distribution "
        f"{dist} {version}) failed to load: {type(error).__name__}: {error}; {how}"
    )


def _missing_message(short_group: str, group: str, name: str) -> str:
    installed = ", ".join(ep.name for ep in installed_entry_points(group)) or "none"
    hint = (
        f" (set {CHOSEN_BY_SETTING[short_group]} to one of them)"
        if short_group in CHOSEN_BY_SETTING
        else ""
    )
    kind = short_group[:-1].replace("_", " ")
    return f"no {kind} named {name!r} is installed; installed: {installed}{hint}"


def list_installed(host: PluginHost | None) -> list[InstalledPlugin]:
    """Every entry point of every deskpool group, with its distribution and load state."""
    loaded = set(host.loaded) if host else set()
    rows = []
    for short_group, group in ENTRY_POINT_GROUPS.items():
        for entry_point in installed_entry_points(group):
            dist, version = _distribution_of(group, entry_point.name)
            rows.append(
                InstalledPlugin(
                    group=short_group,
                    name=entry_point.name,
                    target=entry_point.value,
                    distribution=dist,
                    version=version,
                    loaded=(short_group, entry_point.name) in loaded,
                )
            )
    return rows
