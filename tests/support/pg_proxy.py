"""A TCP proxy in front of PostgreSQL that can lose a connection while its ``COMMIT`` is in flight.

What a client sees when the network or the server's host fails at the worst moment: the
``COMMIT`` reached the server (which committed), and its answer never came back. The proxy
relays bytes both ways; once :meth:`CommitCutter.arm` is called, the first connection that sends
a statement containing ``marker`` and then ``COMMIT`` has that ``COMMIT`` forwarded, is given
:data:`SETTLE` seconds for the server to commit, and is then closed on both sides, its answer
dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

#: How long the server is given to commit before the connection is closed.
SETTLE = 0.3

#: The simple-protocol ``COMMIT`` asyncpg sends (``Q``, length 12, ``COMMIT;``, NUL).
COMMIT = b"Q\x00\x00\x00\x0cCOMMIT;\x00"


class CommitCutter:
    """The proxy's state: whether a cut is armed, for which statement, and whether it was made."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.marker: bytes | None = None
        self.cuts = 0
        self.server: asyncio.Server | None = None

    def arm(self, marker: str) -> None:
        """Cut the next connection whose work contains ``marker`` when it commits."""
        self.marker = marker.encode()

    @property
    def port(self) -> int:
        """The port the proxy listens on (127.0.0.1)."""
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        lost = asyncio.Event()

        async def upward() -> None:
            seen = False
            while data := await reader.read(65536):
                marker = self.marker
                if marker is not None and marker in data:
                    seen = True
                up_writer.write(data)
                await up_writer.drain()
                if seen and marker is not None and self.marker is marker and COMMIT in data:
                    self.marker = None
                    self.cuts += 1
                    lost.set()
                    await asyncio.sleep(SETTLE)
                    return

        async def downward() -> None:
            while data := await up_reader.read(65536):
                if lost.is_set():
                    return
                writer.write(data)
                await writer.drain()

        relays = [asyncio.create_task(upward()), asyncio.create_task(downward())]
        try:
            await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for relay in relays:
                relay.cancel()
            for stream in (writer, up_writer):
                with contextlib.suppress(OSError):
                    stream.transport.abort()


@contextlib.asynccontextmanager
async def commit_cutter(database_url: str) -> AsyncIterator[tuple[CommitCutter, str]]:
    """A proxy to the server of ``database_url``, and the URL of the same database through it."""
    parts = urlsplit(database_url)
    cutter = CommitCutter((parts.hostname or "127.0.0.1", parts.port or 5432))
    cutter.server = await asyncio.start_server(cutter._serve, "127.0.0.1", 0)
    secret = f":{parts.password}" if parts.password else ""
    user = f"{parts.username}{secret}@" if parts.username else ""
    proxied = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{cutter.port}"))
    try:
        yield cutter, proxied
    finally:
        cutter.server.close()
