"""A component that serves an aiohttp application on one address.

The api, gateway and web components are all listeners: they differ in the application they
serve, the address setting they bind and how long in-flight requests may drain at stop.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from deskpool.config import HostPort
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)


class HttpListenerComponent(ABC):
    """Serves :meth:`create_app` on :attr:`address` until stopped.

    :param runtime: the process runtime.
    """

    name: str = "listener"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._runner: web.AppRunner | None = None
        self._started = False

    @property
    @abstractmethod
    def address(self) -> HostPort:
        """The address to bind."""

    @property
    def shutdown_timeout(self) -> float:
        """Seconds in-flight requests get to finish at stop."""
        return 10.0

    @abstractmethod
    def create_app(self) -> web.Application:
        """The application to serve."""

    @property
    def started(self) -> bool:
        """Whether the listener is bound."""
        return self._started

    async def start(self) -> None:
        """Build the application and bind the address."""
        self._runner = web.AppRunner(
            self.create_app(),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=self.shutdown_timeout,
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address.host, self.address.port).start()
        self._started = True
        log.info("%s listening on http://%s", self.name, self.address)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests drain within the timeout, then close."""
        self._started = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
