"""The client side of the Guacamole handshake, as guacamole-common's ``ConfiguredGuacamoleSocket``.

``select`` a protocol (or a ``$id`` to join a connection), read ``args``, negotiate the protocol
version (the lower of guacd's and ``VERSION_1_5_0``), send ``size``, ``audio``, ``video`` and
``image``, ``timezone`` (from 1.1.0) and ``name`` (from 1.5.0) when known, then ``connect`` with
one value per argument in the order guacd asked, and expect ``ready`` with the connection id.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass

from deskpool.guacamole.instruction import Instruction, ProtocolError, encode
from deskpool.guacamole.status import Status
from deskpool.guacamole.stream import InstructionReader, StreamClosed

__all__ = [
    "LATEST_VERSION",
    "ClientInfo",
    "Handshake",
    "HandshakeError",
    "negotiate_version",
    "perform_handshake",
]

#: The newest protocol version this side speaks.
LATEST_VERSION = (1, 5, 0)
_VERSION = re.compile(r"VERSION_(\d+)_(\d+)_(\d+)")


@dataclass(frozen=True)
class ClientInfo:
    """What the handshake tells the daemon about the client's display."""

    width: int = 1024
    height: int = 768
    dpi: int = 96
    audio: tuple[str, ...] = ()
    video: tuple[str, ...] = ()
    image: tuple[str, ...] = ("image/png", "image/jpeg", "image/webp")
    timezone: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Handshake:
    """A completed handshake."""

    connection_id: str
    #: The negotiated version, e.g. ``(1, 5, 0)``; ``(1, 0, 0)`` for a daemon that sent none.
    version: tuple[int, int, int]
    #: The argument names guacd asked for, in order (the version excluded).
    arg_names: tuple[str, ...]


class HandshakeError(Exception):
    """The daemon refused or broke the handshake; ``status`` is what the browser is told."""

    def __init__(self, message: str, status: Status) -> None:
        super().__init__(message)
        self.status = status


def negotiate_version(offered: str) -> tuple[int, int, int] | None:
    """The version to answer ``args``' first element with, or ``None`` if it is no version."""
    match = _VERSION.fullmatch(offered)
    if match is None:
        return None
    version = (int(match[1]), int(match[2]), int(match[3]))
    return min(version, LATEST_VERSION)


def _version_text(version: tuple[int, int, int]) -> str:
    return "VERSION_{}_{}_{}".format(*version)


def _refusal(instruction: Instruction, waiting_for: str) -> HandshakeError:
    if instruction.opcode == "error":
        code = instruction.args[1] if len(instruction.args) > 1 else ""
        status = Status.from_code(int(code)) if code.isdigit() else None
        message = instruction.args[0] if instruction.args else "error"
        return HandshakeError(
            f"the daemon answered an error: {message}", status or Status.SERVER_ERROR
        )
    if instruction.opcode == "disconnect":
        return HandshakeError(
            f"the daemon disconnected while waiting for {waiting_for!r}", Status.UPSTREAM_ERROR
        )
    return HandshakeError(
        f"expected {waiting_for!r} from the daemon, received {instruction.opcode!r}",
        Status.UPSTREAM_ERROR,
    )


async def _expect(reader: InstructionReader, opcode: str) -> Instruction:
    try:
        instruction = await reader.read()
    except StreamClosed:
        raise HandshakeError(
            f"the daemon closed the connection while waiting for {opcode!r}",
            Status.UPSTREAM_ERROR,
        ) from None
    except ProtocolError as error:
        message = f"the daemon broke the protocol: {error}"
        raise HandshakeError(message, Status.UPSTREAM_ERROR) from None
    if instruction.opcode != opcode:
        raise _refusal(instruction, opcode)
    return instruction


async def perform_handshake(
    reader: InstructionReader,
    writer: asyncio.StreamWriter,
    select: str,
    parameters: Mapping[str, str],
    info: ClientInfo,
    *,
    within: float,
) -> Handshake:
    """Run the handshake on an open daemon connection.

    :param select: the protocol (``vnc``, ``rdp``) or a ``$id`` to join.
    :param parameters: a value per argument name; names guacd asks for and ``parameters``
        lacks are answered with an empty string.
    :param within: seconds the daemon has for the whole handshake.
    :raises HandshakeError: the daemon refused, broke the protocol, closed, or was too slow
        (``UPSTREAM_TIMEOUT``).
    """
    try:
        async with asyncio.timeout(within):
            return await _handshake(reader, writer, select, parameters, info)
    except TimeoutError:
        raise HandshakeError(
            "the daemon did not complete the handshake in time", Status.UPSTREAM_TIMEOUT
        ) from None
    except ConnectionError as error:
        raise HandshakeError(
            f"the daemon connection failed: {error}", Status.UPSTREAM_ERROR
        ) from None


async def _handshake(
    reader: InstructionReader,
    writer: asyncio.StreamWriter,
    select: str,
    parameters: Mapping[str, str],
    info: ClientInfo,
) -> Handshake:
    writer.write(encode("select", select).encode())
    await writer.drain()
    args = (await _expect(reader, "args")).args
    version = negotiate_version(args[0]) if args else None
    names = args[1:] if version is not None else args
    values = [parameters.get(name, "") for name in names]
    if version is not None:
        values.insert(0, _version_text(version))
    negotiated = version or (1, 0, 0)
    parts = [
        encode("size", info.width, info.height, info.dpi),
        encode("audio", *info.audio),
        encode("video", *info.video),
        encode("image", *info.image),
    ]
    if info.timezone and negotiated >= (1, 1, 0):
        parts.append(encode("timezone", info.timezone))
    if info.name and negotiated >= (1, 5, 0):
        parts.append(encode("name", info.name))
    parts.append(encode("connect", *values))
    writer.write("".join(parts).encode())
    await writer.drain()
    ready = await _expect(reader, "ready")
    if not ready.args:
        raise HandshakeError("the daemon sent no connection id", Status.UPSTREAM_ERROR)
    return Handshake(ready.args[0], negotiated, tuple(names))
