"""The worker's syslog streamer: the audit trail, from the database's cursor, to a syslog server.

One worker at a time streams (a lease on the cursor's row). It reads up to a batch of events
after the cursor, writes them to the server (RFC 5424, octet-counting framing, over TCP or TLS),
and waits :attr:`StreamSettings.confirm_wait` with the connection open before moving the
cursor past them: syslog over TCP has no acknowledgement, and a server that stops closes the
connection, losing what it had not taken yet. A connection found closed then is opened again and
the batch is sent again from the cursor. So a server that is down, or a worker killed while it
streams, loses nothing, and the server receives at most the last batch twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from deskpool.errors import error_text
from deskpool.syslog_export import store
from deskpool.syslog_export.model import Origin, format_event, frame

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: The longest wait between two attempts to reach the server.
MAX_RECONNECT_WAIT = 30.0


class ConnectionLost(Exception):
    """The syslog server closed the connection (or it broke)."""


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Where and how the streamer sends.

    :param host: the syslog server.
    :param port: its TCP port.
    :param origin: HOSTNAME, APP-NAME and facility of the messages.
    :param holder: the lease holder's name (the worker's id).
    :param tls: a TLS context when the server speaks TLS (RFC 5425), else ``None``.
    :param batch_size: the most events written before the cursor moves.
    :param confirm_wait: how long the connection must stay open after a batch, in seconds.
    :param poll_interval: the wait when there is nothing to send, in seconds.
    :param lease: how long the cursor stays leased without renewal.
    :param timeout: the longest a connection or a write may take, in seconds.
    """

    host: str
    port: int
    origin: Origin
    holder: str
    tls: ssl.SSLContext | None = None
    batch_size: int = 500
    confirm_wait: float = 0.5
    poll_interval: float = 1.0
    lease: timedelta = timedelta(seconds=20)
    timeout: float = 10.0


class SyslogStreamer:
    """Streams the audit trail until cancelled (:meth:`run`)."""

    def __init__(self, runtime: Runtime, settings: StreamSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None

    async def run(self) -> None:
        """Stream, reconnecting after a growing wait when the server or the database fails."""
        wait = 1.0
        try:
            while True:
                try:
                    if await self.stream():
                        wait = 1.0
                except asyncio.CancelledError:
                    raise
                except (OSError, TimeoutError, ConnectionLost, ssl.SSLError) as error:
                    log.warning(
                        "syslog %s:%d: %s; retrying in %.0f s",
                        self.settings.host,
                        self.settings.port,
                        error_text(error) if not isinstance(error, OSError) else error,
                        wait,
                    )
                except Exception as error:  # the database went away: later
                    log.warning("syslog export failed: %s", error_text(error))
                await self._close()
                await asyncio.sleep(wait)
                wait = min(wait * 2, MAX_RECONNECT_WAIT)
        finally:
            await self._close()
            try:
                await store.release(self.runtime.db, self.settings.holder)
            except Exception as error:  # the lease runs out by itself
                log.info("syslog export: releasing the cursor failed: %s", error_text(error))

    async def stream(self) -> bool:
        """Hold the cursor and stream until the connection or the lease is lost.

        :returns: ``False`` when another worker holds the cursor (nothing was sent).
        """
        settings = self.settings
        db = self.runtime.db
        position = await store.claim(db, settings.holder, settings.lease)
        if position is None:
            return False
        await self._connect()
        while True:
            batch = await store.events_after(db, position, settings.batch_size)
            if batch:
                await self._send(b"".join(frame(self._message(item)) for item in batch))
            await asyncio.sleep(settings.confirm_wait if batch else settings.poll_interval)
            self._check_open()
            if batch:
                position = batch[-1].position
            if not await store.advance(db, settings.holder, settings.lease, position):
                log.warning("syslog export: the cursor's lease was lost; stopping")
                return True

    def _message(self, item: store.Exported) -> bytes:
        return format_event(self.settings.origin, item.event_id, item.event)

    async def _connect(self) -> None:
        settings = self.settings
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(
                settings.host,
                settings.port,
                ssl=settings.tls,
                server_hostname=settings.host if settings.tls is not None else None,
            ),
            settings.timeout,
        )
        log.info("syslog export: connected to %s:%d", settings.host, settings.port)

    async def _send(self, data: bytes) -> None:
        self._check_open()
        assert self._writer is not None
        self._writer.write(data)
        await asyncio.wait_for(self._writer.drain(), self.settings.timeout)

    def _check_open(self) -> None:
        """:raises ConnectionLost: the server closed the connection (it never sends anything)."""
        if (
            self._writer is None
            or self._reader is None
            or self._writer.is_closing()
            or self._reader.at_eof()
            or self._reader.exception() is not None
        ):
            raise ConnectionLost("the server closed the connection")

    async def _close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is None:
            return
        writer.close()
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
            await asyncio.wait_for(writer.wait_closed(), 2)
