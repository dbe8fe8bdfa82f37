"""One open tunnel: the relay between a browser's WebSocket and a desktop daemon connection.

Daemon to browser: bytes are decoded, cut after the last complete instruction, and sent as one
WebSocket text message, so an instruction is never split across messages and as many complete
instructions as arrived travel together (guacamole-common's endpoint batches the same way). The
next read from the daemon waits until the WebSocket took the message: a slow browser slows the
daemon down through TCP, and nothing piles up here.

Browser to daemon: each message is checked against guacd's parser limits; tunnel-internal
instructions (opcode ``""``) never reach the daemon: ``ping`` is echoed back, the rest dropped.
Until the daemon drew its first frame, input is held, and a read-only tunnel's input is dropped
(:mod:`deskpool_gateway.input`). Writes wait for the daemon socket to drain before the next
message is read.

A daemon that completes the handshake but draws nothing within ``GATEWAY_FIRST_FRAME_TIMEOUT``
ends the tunnel with ``UPSTREAM_TIMEOUT``: a first frame is something drawn, not a bare ``sync``
(:mod:`deskpool_gateway.drawing`). The daemon's own ``disconnect`` followed by the end of its
socket is an orderly end (``SUCCESS``, ``desktop_closed``); a socket that ends without it is a
hang-up, the connection's process died: ``UPSTREAM_ERROR``, ``daemon_error`` (the pool keeps the
desktop for its user). A tunnel ends once, with a Guacamole status (the WebSocket close code and
reason) and a :class:`~deskpool.sessions.tunnel.SessionEndReason` for the session record; when
the daemon failed, the browser is sent an ``error`` instruction with that status and what
happened before the close (``Guacamole.Client.onerror`` gets both). However it ends, the daemon
is sent ``disconnect`` before its socket is closed (guacd otherwise keeps the remote connection
open for seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from deskpool.guacamole import INTERNAL_OPCODE, InstructionParser, ProtocolError, Status, encode
from deskpool.guacamole.instruction import Utf8Decoder
from deskpool.sessions.tunnel import SessionEndReason, TunnelCounters, TunnelGrant
from deskpool_gateway.drawing import FirstFrame, ends_with_disconnect
from deskpool_gateway.input import BrowserInput, HeldInputOverflow
from deskpool_gateway.recording import Recorder
from deskpool_gateway.transfers import StreamGuard
from deskpool_gateway.watermark import Watermark

if TYPE_CHECKING:
    from deskpool_gateway.metrics import GatewayMetrics

__all__ = ["Tunnel"]

log = logging.getLogger(__name__)

#: Bytes asked of the daemon socket per read.
READ_SIZE = 65536
#: Instructions from the browser that are not user input (the idle timeout ignores them).
NOT_INPUT = frozenset({"sync", "nop", "ack", INTERNAL_OPCODE})
#: What the daemon is sent before its socket is closed.
DISCONNECT = encode("disconnect").encode()


def _last_sync_timestamp(text: str) -> str | None:
    """The timestamp of the last ``sync`` of ``text`` (complete instructions), if any."""
    at = text.rfind("4.sync,")
    if at < 0:
        return None
    dot = text.find(".", at + 7)
    try:
        length = int(text[at + 7 : dot])
    except ValueError:
        return None
    stamp = text[dot + 1 : dot + 1 + length]
    return stamp if stamp.isascii() and stamp.isdigit() else None


def _first_opcode(text: str) -> str:
    """The opcode of the first instruction of ``text`` (complete instructions only)."""
    dot = text.find(".")
    length = int(text[:dot] or 0)
    return text[dot + 1 : dot + 1 + length]


@dataclass(eq=False)
class Tunnel:
    """A browser connected to a desktop through this gateway.

    :param grant: the redeemed token.
    :param ws: the browser's WebSocket, prepared.
    :param reader: the daemon connection, handshake done.
    :param writer: the daemon connection's writer.
    """

    grant: TunnelGrant
    ws: web.WebSocketResponse
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    decoder: Utf8Decoder
    metrics: GatewayMetrics
    idle_timeout: float | None = None
    max_duration: float | None = None
    #: Seconds the daemon has to draw its first frame (``None``: no limit).
    first_frame_timeout: float | None = None
    #: Most characters of input held until then.
    held_input_limit: int = 262144
    counters: TunnelCounters = field(default_factory=TunnelCounters)
    opened: float = field(default_factory=time.monotonic)
    #: Monotonic times of the last message from each side (for the receive timeouts).
    last_browser: float = field(default_factory=time.monotonic)
    last_daemon: float = field(default_factory=time.monotonic)
    #: Monotonic time of the last user input (for the idle timeout).
    last_input: float = field(default_factory=time.monotonic)
    status: Status | None = None
    end_reason: SessionEndReason | None = None
    #: What the handshake read past ``ready``: the browser gets it right after the UUID.
    leftover: str = ""
    #: Called (in a task of its own, so the relay never waits for it) at the first frame.
    on_first_frame: Callable[[], Coroutine[None, None, None]] | None = None
    #: Records what the browser is sent (:mod:`deskpool_gateway.recording`); ``None``: off.
    recorder: Recorder | None = None
    #: Enforces the client policy on both directions' streams (``None``: nothing governed).
    guard: StreamGuard | None = None
    #: Draws the client policy's watermark over the desktop (it follows the display's size
    #: whether shown or not; ``None``: never drawn).
    watermark: Watermark | None = None
    #: What the watermark's template names, but the time (user, email, session, address).
    watermark_values: dict[str, str] = field(default_factory=dict)
    input: BrowserInput = field(init=False)
    #: Whether the browser was told the tunnel's UUID (an ``error`` may follow it).
    _announced: bool = False
    _closing: asyncio.Task[None] | None = None
    #: The latest message to the browser holding a ``sync`` (watermarked tunnels only).
    _synced: str = ""
    _first_frame_timer: asyncio.TimerHandle | None = None
    _first_frame_report: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.input = BrowserInput(read_only=self.grant.read_only, limit=self.held_input_limit)

    @property
    def session_id(self) -> str:
        """The session's id, which is also the tunnel's UUID the browser is told."""
        return str(self.grant.session_id)

    @property
    def ended(self) -> bool:
        """Whether the tunnel is ending or has ended."""
        return self.status is not None

    @property
    def up(self) -> bool:
        """Whether the daemon has drawn its first frame (input is no longer held)."""
        return self.input.up

    async def run(self) -> None:
        """Relay until either side ends or :meth:`close` is called."""
        self.counters.last_activity = time.time()
        if self.first_frame_timeout:
            self._first_frame_timer = asyncio.get_running_loop().call_later(
                self.first_frame_timeout, self._no_first_frame
            )
        to_browser = asyncio.create_task(self._daemon_to_browser(self.leftover))
        try:
            await self._browser_to_daemon()
        finally:
            if not to_browser.done():
                to_browser.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await to_browser
            if self._closing is not None:
                await self._closing
            if self._first_frame_report is not None:
                await self._first_frame_report
            self._hang_up()
            if self.guard is not None:
                self.guard.close()
            if self.recorder is not None:
                await self.recorder.close()

    def close(self, status: Status, reason: SessionEndReason, message: str = "") -> None:
        """End the tunnel with ``status`` (the first call wins); returns at once.

        :param message: what happened, sent to the browser in an ``error`` instruction with
            ``status`` before the close (none when empty).
        """
        if self.status is not None:
            return
        self.status, self.end_reason = status, reason
        self._hang_up()
        self._closing = asyncio.create_task(self._close_websocket(status, message))

    def _hang_up(self) -> None:
        """Send the daemon ``disconnect`` (after what was written, flushed), then close."""
        if self._first_frame_timer is not None:
            self._first_frame_timer.cancel()
        if not self.writer.is_closing():
            self.writer.write(DISCONNECT)
            self.writer.close()

    def _no_first_frame(self) -> None:
        if self.up or self.ended:
            return
        log.warning(
            "tunnel %s: the desktop daemon drew nothing within %g s",
            self.session_id,
            self.first_frame_timeout,
        )
        self.metrics.refused("daemon_first_frame")
        self.close(
            Status.UPSTREAM_TIMEOUT,
            SessionEndReason.DAEMON_ERROR,
            f"The desktop showed nothing within {self.first_frame_timeout:g} s.",
        )

    def _daemon_up(self) -> None:
        """The daemon drew its first frame: forward what the browser sent meanwhile."""
        if self._first_frame_timer is not None:
            self._first_frame_timer.cancel()
        if self.on_first_frame is not None and self._first_frame_report is None:
            self._first_frame_report = asyncio.create_task(self.on_first_frame())
        held = self.input.release()
        if held and not self.writer.is_closing():
            data = held.encode()
            self.counters.bytes_to_desktop += len(data)
            self.metrics.bytes_to_desktop.inc(len(data))
            self.writer.write(data)

    async def draw(self, text: str) -> None:
        """Send the browser ``text``: complete instructions the gateway draws itself.

        The watermark's, recorded like the rest; nothing once the tunnel ends. They end with a
        ``sync`` repeating the timestamp of guacd's latest frame, so the browser draws them at
        once (it draws only at a ``sync``) and its answer acknowledges a frame guacd did send.
        """
        if not text or self.ended or not self._announced or self.ws.closed:
            return
        stamp = _last_sync_timestamp(self._synced)
        if stamp is not None:
            text += encode("sync", stamp, 0)
        payload = text.encode()
        if self.recorder is not None:
            self.recorder.output(payload)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_frame(payload, WSMsgType.TEXT)

    async def _close_websocket(self, status: Status, message: str) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            if message and self._announced and not self.ws.closed:
                await self.ws.send_str(encode("error", message, int(status)))
            await self.ws.close(code=status.websocket_code, message=status.close_reason.encode())

    async def _daemon_to_browser(self, leftover: str) -> None:
        parser = InstructionParser()
        send, text_frame = self.ws.send_frame, WSMsgType.TEXT
        bytes_out = self.metrics.bytes_to_browser
        first_frame = FirstFrame()
        try:
            await self.ws.send_str(encode(INTERNAL_OPCODE, self.session_id))
            self._announced = True
            text = last = parser.feed(leftover)
            guard = self.guard
            if text and guard is not None:
                text = self._guarded_output(guard, text)
            watermark = self.watermark
            if text and watermark is not None:
                text = watermark.apply(text)
                if "4.sync," in text:
                    self._synced = text
            if text and first_frame.feed(text):
                self._daemon_up()
            record = self.recorder.output if self.recorder is not None else None
            if text:
                payload = text.encode()
                if record is not None:
                    record(payload)
                await send(payload, text_frame)
            read, decode, feed = self.reader.read, self.decoder.decode, parser.feed
            counters = self.counters
            while True:
                try:
                    data = await read(READ_SIZE)
                except ConnectionError as error:
                    # The connection's process died leaving input unread: the kernel reset
                    # the socket rather than closed it. The same hang-up as an end of stream.
                    log.debug("tunnel %s: daemon socket reset: %s", self.session_id, error)
                    data = b""
                if not data:
                    break
                self.last_daemon = time.monotonic()
                counters.bytes_to_browser += len(data)
                bytes_out.inc(len(data))
                text = feed(decode(data))
                if text and guard is not None:
                    text = self._guarded_output(guard, text)
                if text and watermark is not None:
                    text = watermark.apply(text)
                    if "4.sync," in text:
                        self._synced = text
                if not self.input.up and text and first_frame.feed(text):
                    self._daemon_up()
                if text:
                    last = text
                    # Encoded here rather than by send_str: the recorder keeps these very bytes.
                    payload = text.encode()
                    if record is not None:
                        record(payload)
                    await send(payload, text_frame)
        except ProtocolError as error:
            log.warning("tunnel %s: the daemon broke the protocol: %s", self.session_id, error)
            self.close(
                Status.UPSTREAM_ERROR,
                SessionEndReason.DAEMON_ERROR,
                "The desktop daemon sent something it should not have.",
            )
        except (ConnectionError, RuntimeError) as error:
            log.debug("tunnel %s: relay to the browser stopped: %s", self.session_id, error)
            self.close(Status.SUCCESS, SessionEndReason.CLIENT_CLOSED)
        else:
            if self.ended or ends_with_disconnect(last):
                self.close(Status.SUCCESS, SessionEndReason.DESKTOP_CLOSED)
                return
            log.warning(
                "tunnel %s: the desktop daemon closed the connection without disconnect "
                "(its connection's process ended)",
                self.session_id,
            )
            self.metrics.refused("daemon_hang_up")
            self.close(
                Status.UPSTREAM_ERROR,
                SessionEndReason.DAEMON_ERROR,
                "The desktop daemon's connection ended without a word.",
            )

    async def _browser_to_daemon(self) -> None:
        parser = InstructionParser()
        writer = self.writer
        counters = self.counters
        bytes_in = self.metrics.bytes_to_desktop
        recorder = self.recorder
        try:
            async for message in self.ws:
                now = time.monotonic()
                self.last_browser = now
                if message.type is not WSMsgType.TEXT:
                    if message.type is WSMsgType.BINARY:
                        self.close(Status.CLIENT_BAD_TYPE, SessionEndReason.CLIENT_CLOSED)
                    break
                text = parser.feed(message.data)
                if not text:
                    continue
                if text.startswith("0.") or ";0." in text:
                    text = await self._internal(text)
                    if not text:
                        continue
                if self.guard is not None and not self.input.read_only:
                    text, answer = self.guard.from_browser(text)
                    if answer:
                        await self.ws.send_str(answer)
                    if not text:
                        continue
                text = self.input.admit(text)
                if not text:
                    continue
                if recorder is not None:
                    recorder.input(text)
                if _first_opcode(text) not in NOT_INPUT:
                    self.last_input = now
                    counters.last_activity = time.time()
                data = text.encode()
                counters.bytes_to_desktop += len(data)
                bytes_in.inc(len(data))
                writer.write(data)
                await writer.drain()
        except ProtocolError as error:
            log.info("tunnel %s: refused browser input: %s", self.session_id, error)
            self.close(error.status, SessionEndReason.CLIENT_CLOSED)
        except HeldInputOverflow as error:
            log.info("tunnel %s: refused browser input: %s", self.session_id, error)
            self.metrics.refused("held_input_overflow")
            self.close(Status.CLIENT_OVERRUN, SessionEndReason.CLIENT_CLOSED)
        except (ConnectionError, RuntimeError) as error:
            log.debug("tunnel %s: relay to the daemon stopped: %s", self.session_id, error)
            self.close(
                Status.UPSTREAM_ERROR,
                SessionEndReason.DAEMON_ERROR,
                "The desktop daemon's connection ended without a word.",
            )
        self.close(Status.SUCCESS, SessionEndReason.CLIENT_CLOSED)

    def _guarded_output(self, guard: StreamGuard, text: str) -> str:
        """What of the daemon's ``text`` the client policy lets through to the browser.

        The answers to the daemon (a refused download's ``ack``) are written at once.
        """
        text, answer = guard.from_daemon(text)
        if answer and not self.writer.is_closing():
            self.writer.write(answer.encode())
        return text

    async def _internal(self, text: str) -> str:
        """Answer the internal instructions of ``text``; return the rest, re-encoded."""
        forwarded: list[str] = []
        for instruction in InstructionParser().feed_instructions(text):
            if instruction.opcode != INTERNAL_OPCODE:
                forwarded.append(instruction.encode())
            elif len(instruction.args) >= 2 and instruction.args[0] == "ping":
                await self.ws.send_str(encode(INTERNAL_OPCODE, "ping", instruction.args[1]))
        return "".join(forwarded)
