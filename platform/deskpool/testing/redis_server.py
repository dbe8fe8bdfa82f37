"""A Redis server of a test's own, to stop and start again (never the shared one).

Tests of what deskpool does while Redis is away run their processes against a
:class:`PrivateRedis`: ``redis-server`` on a free port of the loopback, persisting nothing
(``--save ''``), started by the test and stopped by it. :meth:`PrivateRedis.stop` stops the
server (it answers nothing: a connection is refused), :meth:`PrivateRedis.start` starts it
again on the same port, empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
from collections.abc import AsyncIterator

import redis.asyncio as redis


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class PrivateRedis:
    """``redis-server`` on a port of its own; :attr:`address` is its ``KVSTORE_ADDR``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    async def start(self, within: float = 10.0) -> None:
        """Start the server (empty) and wait until it answers ``PING``."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (the tests' Redis needs it too)")
        self.process = await asyncio.create_subprocess_exec(
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            async with asyncio.timeout(within):
                while True:
                    with contextlib.suppress(OSError, redis.RedisError):
                        if await client.ping():
                            return
                    await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    async def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and wait for it to be gone."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def private_redis() -> AsyncIterator[PrivateRedis]:
    """A started :class:`PrivateRedis`, stopped on the way out."""
    server = PrivateRedis()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
