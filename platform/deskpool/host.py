"""The host: builds a process from the environment and runs its components until a signal.

:func:`bootstrap` loads the plugins a process needs and reads its configuration (the plugins'
declarations included) once. :meth:`Host.run` opens the runtime, starts the ops listener and the
components in the order named, waits for SIGTERM or SIGINT, then stops the components in
reverse order, each draining within its own shutdown timeout.

Once every component started, the addresses the listeners bound (a port picked by the system
when one asked for port 0) are written as JSON to ``LISTEN_ADDRESSES_FILE`` when it is set
(:meth:`Host.bound_addresses`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from deskpool import __version__
from deskpool.config import Config, load_config
from deskpool.errors import StartupError
from deskpool.listener import HttpListenerComponent
from deskpool.log import configure_logging
from deskpool.ops import OpsListener
from deskpool.plugins import PluginHost, PluginSelection, load_plugins
from deskpool.runtime import Component, Runtime

log = logging.getLogger(__name__)

#: The components ``deskpool run all`` starts, in start order.
ALL_COMPONENTS = ("api", "worker", "gateway", "web")


@dataclass(frozen=True)
class Process:
    """The plugins and configuration of one process, before anything is connected."""

    plugins: PluginHost
    config: Config
    components: tuple[str, ...]


def expand_components(names: Sequence[str]) -> tuple[str, ...]:
    """Expand ``all`` and drop repeats, keeping the order given."""
    expanded: list[str] = []
    for name in names:
        for item in ALL_COMPONENTS if name == "all" else (name,):
            if item not in expanded:
                expanded.append(item)
    return tuple(expanded)


def discover(environ: Mapping[str, str], components: Sequence[str] | None = None) -> PluginHost:
    """Load the plugins a process needs, without reading the rest of the configuration.

    :param components: the components this process runs (``None``: every installed one, for
        commands that only inspect or document).
    :raises StartupError: a plugin failed to load, or a chosen one is not installed.
    """
    wanted = expand_components(components) if components is not None else None
    return load_plugins(PluginSelection.from_environ(environ, wanted))


def bootstrap(
    environ: Mapping[str, str], components: Sequence[str] | None = None, *, log_setup: bool = True
) -> Process:
    """Load plugins and read the configuration once.

    :param components: the components this process runs (``None``: load every installed one,
        for commands that only inspect).
    :raises StartupError: a plugin failed to load or the configuration is invalid.
    """
    wanted = expand_components(components) if components is not None else None
    plugins = discover(environ, wanted)
    config = load_config(plugins.settings(), environ)
    if log_setup:
        configure_logging(config["LOG_LEVEL"], config["APP_ENV"])
    plugins.configure(config)
    return Process(plugins, config, wanted or ())


def create_components(runtime: Runtime, names: Sequence[str]) -> list[Component]:
    """Instantiate the named components from the component registry."""
    registry = runtime.plugins.components()
    unknown = [name for name in names if name not in registry]
    if unknown:
        known = ", ".join(registry.names()) or "none"
        raise StartupError(f"unknown component(s) {', '.join(unknown)}; installed: {known}")
    return [registry.get(name)(runtime) for name in names]


class Host:
    """Runs the components of one process.

    :param process: what :func:`bootstrap` returned.
    :param also_bound: addresses of listeners the process runs besides its components (the
        development issuer of ``deskpool dev``...), by name, for :meth:`bound_addresses`.
    """

    def __init__(self, process: Process, also_bound: Mapping[str, str] | None = None) -> None:
        self.process = process
        self.also_bound = dict(also_bound or {})
        self.runtime = Runtime(process.config, process.plugins)
        self.ops = OpsListener(self.runtime)
        self.stopping = asyncio.Event()
        self._started: list[Component] = []

    async def start(self) -> None:
        """Open the runtime, start the ops listener and every component, in order."""
        await self.runtime.open()
        try:
            for component in create_components(self.runtime, self.process.components):
                self.runtime.components[component.name] = component
            await self.ops.start()
            for component in self.runtime.components.values():
                await component.start()
                self._started.append(component)
                log.info("component %s started", component.name)
            self._write_addresses()
        except BaseException:
            await self.stop()
            raise

    def bound_addresses(self) -> dict[str, str]:
        """The address each started listener bound (``host:port``), by name."""
        bound = {} if self.ops.bound is None else {"ops": str(self.ops.bound)}
        for component in self._started:
            if isinstance(component, HttpListenerComponent) and component.runner is not None:
                bound[component.name] = str(component.bound)
        return {**bound, **self.also_bound}

    def _write_addresses(self) -> None:
        """Write :meth:`bound_addresses` to ``LISTEN_ADDRESSES_FILE`` (whole, or not at all)."""
        target = self.process.config["LISTEN_ADDRESSES_FILE"]
        if not target:
            return
        path = Path(target)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(self.bound_addresses()))
        partial.replace(path)

    async def stop(self) -> None:
        """Stop the components in reverse order, then the ops listener and the runtime."""
        while self._started:
            component = self._started.pop()
            try:
                await component.stop()
                log.info("component %s stopped", component.name)
            except Exception:
                log.exception("component %s failed to stop cleanly", component.name)
        await self.ops.stop()
        await self.runtime.close()

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop (what SIGTERM and SIGINT do)."""
        self.stopping.set()

    async def run(self) -> None:
        """Start, wait for SIGTERM/SIGINT (or :meth:`request_stop`), then drain and stop."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            names = ", ".join(self.runtime.components)
            log.info("deskpool %s running: %s", __version__, names)
            await self.stopping.wait()
            log.info("stopping: draining %s", names)
            await self.stop()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
