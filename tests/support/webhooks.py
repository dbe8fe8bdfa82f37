"""A webhook receiver for the tests.

A real HTTP server that verifies every delivery's signature with the ``standardwebhooks``
library, keeps what it received in order, and answers what the test tells it to (200, or a
failure status for a while).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    """One request the receiver answered."""

    message_id: str
    payload: dict[str, Any]
    status: int


@dataclass
class WebhookReceiver:
    """``async with WebhookReceiver() as receiver``: listening on loopback at ``receiver.url``.

    Set :attr:`secret` before deliveries arrive; :attr:`status` is what it answers (a failure
    status makes the sender retry). A delivery whose signature does not verify is answered 401
    and counted in :attr:`refused`.
    """

    secret: str = ""
    status: int = 200
    received: list[Received] = field(default_factory=list)
    refused: int = 0
    _runner: web.AppRunner | None = None
    _port: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        """Where to send deliveries."""
        return f"http://127.0.0.1:{self._port}/hooks"

    @property
    def delivered(self) -> list[Received]:
        """The requests answered 2xx, in the order they came."""
        return [item for item in self.received if 200 <= item.status < 300]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        try:
            payload = Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError:
            self.refused += 1
            return web.Response(status=401)
        self.received.append(Received(request.headers["webhook-id"], payload, self.status))
        self._arrived.set()
        return web.Response(status=self.status, text=json.dumps({"ok": self.status < 300}))

    async def wait_for(self, predicate: Any, seconds: float) -> None:
        """Wait until ``predicate(self)`` holds. :raises TimeoutError: it did not in time."""
        async with asyncio.timeout(seconds):
            while not predicate(self):
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), 0.5)

    async def __aenter__(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/hooks", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
