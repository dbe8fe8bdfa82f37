"""A browser that keeps a desktop's tunnel alive: it answers every frame and pings each second."""

from __future__ import annotations

import asyncio
import contextlib
import time

from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient


class Flow:
    """What a browser showing the desktop does: it answers every frame and pings each second.

    :attr:`frames` holds the time of each frame (``sync``) the desktop drew through the tunnel.
    """

    def __init__(self, client: WebSocketTunnelClient) -> None:
        self.client = client
        self.frames: list[float] = []
        self.closed: TunnelClosed | None = None
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._ping())]

    async def _read(self) -> None:
        try:
            while True:
                instruction = await self.client.read(within=3600)
                if instruction.opcode == "sync":
                    self.frames.append(time.monotonic())
                    await self.client.send("sync", instruction.args[0])
        except TunnelClosed as closed:
            self.closed = closed

    async def _ping(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                await self.client.ping(int(time.time() * 1000))
                await asyncio.sleep(1)

    def frames_since(self, moment: float) -> int:
        return sum(1 for frame in self.frames if frame >= moment)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
