"""Test doubles for the desktop tunnel: an in-memory session broker and a tunnel client.

:class:`InMemorySessionBroker` implements :class:`deskpool.sessions.tunnel.SessionBroker`
without a database: tests issue tokens for a target and read back what the gateway reported.
:class:`WebSocketTunnelClient` connects to a gateway exactly as guacamole-common-js's
``Guacamole.WebSocketTunnel`` does (``url + "?" + data``, subprotocol ``guacamole``, the first
``""`` instruction is the tunnel's UUID, ``ping`` through internal instructions) and records the
close code and reason the tunnel ended with.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

import aiohttp

from deskpool.client_policy.model import ClientPolicy, Transfer
from deskpool.guacamole import INTERNAL_OPCODE, Instruction, InstructionParser, encode
from deskpool.sessions.tunnel import (
    DesktopTarget,
    DisconnectRequest,
    SessionEndReason,
    TokenRejected,
    TunnelCounters,
    TunnelGrant,
)

__all__ = ["InMemorySessionBroker", "TunnelClosed", "WebSocketTunnelClient"]


@dataclass
class InMemorySessionBroker:
    """A session broker in memory: single-use tokens, and a record of everything reported."""

    tokens: dict[str, TunnelGrant | str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    redeemed: list[tuple[TunnelGrant, str]] = field(default_factory=list)
    connected: dict[uuid.UUID, str] = field(default_factory=dict)
    drawn: set[uuid.UUID] = field(default_factory=set)
    heartbeats: list[tuple[str, dict[uuid.UUID, TunnelCounters]]] = field(default_factory=list)
    ended: dict[uuid.UUID, tuple[SessionEndReason, TunnelCounters]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    #: Sessions the next heartbeat that names them hands back to close (ended, not reopened).
    lost: set[uuid.UUID] = field(default_factory=set)
    #: Client policies by pool (what the gateway reads live); a pool left out keeps its grant's.
    policies: dict[uuid.UUID, ClientPolicy] = field(default_factory=dict)
    #: The transfers the gateway audited, by session.
    transfers: dict[uuid.UUID, list[Transfer]] = field(default_factory=dict)
    _disconnects: asyncio.Queue[DisconnectRequest] = field(default_factory=asyncio.Queue)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def issue(self, target: DesktopTarget | None = None, **grant: Any) -> str:
        """A token for ``target`` (a VNC desktop ``demo-01`` by default); ``grant`` overrides.

        ``reject="expired"`` (or another reason) makes a token that is refused that way.
        """
        token = secrets.token_urlsafe(24)
        reject = grant.pop("reject", None)
        if reject is not None:
            self.tokens[token] = reject
            return token
        self.tokens[token] = TunnelGrant(
            session_id=grant.pop("session_id", uuid.uuid4()),
            user_id=grant.pop("user_id", uuid.uuid4()),
            desktop_id=grant.pop("desktop_id", uuid.uuid4()),
            pool_id=grant.pop("pool_id", uuid.uuid4()),
            target=target or DesktopTarget("vnc", "demo-01", 5900, {"password": "s3cret"}),
            user_display_name=grant.pop("user_display_name", "Ada Lovelace"),
            desktop_name=grant.pop("desktop_name", "demo-01"),
            **grant,
        )
        return token

    def grant_of(self, token: str) -> TunnelGrant:
        """The grant ``token`` was issued with."""
        grant = self.tokens[token]
        assert isinstance(grant, TunnelGrant)
        return grant

    async def redeem(self, token: str, *, gateway_id: str) -> TunnelGrant:
        """Redeem once."""
        if token in self.used:
            raise TokenRejected("used")
        grant = self.tokens.get(token)
        if grant is None:
            raise TokenRejected("unknown")
        self.used.add(token)
        if isinstance(grant, str):
            raise TokenRejected(grant)
        self.redeemed.append((grant, gateway_id))
        return replace(grant)

    async def session_connected(self, session_id: uuid.UUID, *, connection_id: str) -> None:
        """Record the daemon's connection id."""
        self.connected[session_id] = connection_id
        await self._notify()

    async def first_frame(self, session_id: uuid.UUID) -> None:
        """Record the first frame."""
        self.drawn.add(session_id)
        await self._notify()

    async def heartbeat(
        self, gateway_id: str, counters: Mapping[uuid.UUID, TunnelCounters]
    ) -> list[DisconnectRequest]:
        """Record a heartbeat (a copy of the counters); hand back the :attr:`lost` it names."""
        self.heartbeats.append((gateway_id, {k: replace(v) for k, v in counters.items()}))
        closing = [
            DisconnectRequest(session_id, SessionEndReason.GATEWAY_LOST)
            for session_id in counters
            if session_id in self.lost
        ]
        await self._notify()
        return closing

    async def session_ended(
        self, session_id: uuid.UUID, reason: SessionEndReason, counters: TunnelCounters
    ) -> None:
        """Record the end (the first one wins, as the real broker's is idempotent)."""
        self.ended.setdefault(session_id, (reason, replace(counters)))
        await self._notify()

    async def client_policies(
        self, pool_ids: Sequence[uuid.UUID]
    ) -> Mapping[uuid.UUID, ClientPolicy]:
        """The :attr:`policies` of ``pool_ids`` that are set."""
        return {pool_id: self.policies[pool_id] for pool_id in pool_ids if pool_id in self.policies}

    async def record_transfers(self, session_id: uuid.UUID, transfers: Sequence[Transfer]) -> None:
        """Record the audited transfers."""
        self.transfers.setdefault(session_id, []).extend(transfers)
        await self._notify()

    async def wait_transfers(
        self, session_id: uuid.UUID, count: int, within: float = 10.0
    ) -> list[Transfer]:
        """The transfers of ``session_id`` once at least ``count`` are audited."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: len(self.transfers.get(session_id, [])) >= count)
        return self.transfers[session_id]

    async def release(self, gateway_id: str) -> None:
        """Record a gateway stopping cleanly."""
        self.released.append(gateway_id)

    async def disconnect_requests(self, gateway_id: str) -> AsyncIterator[DisconnectRequest]:
        """What :meth:`request_disconnect` asked for."""
        while True:
            yield await self._disconnects.get()

    def request_disconnect(
        self, session_id: uuid.UUID, reason: SessionEndReason = SessionEndReason.ADMIN_DISCONNECT
    ) -> None:
        """Ask the gateway holding ``session_id`` to close it (for ``reason``)."""
        self._disconnects.put_nowait(DisconnectRequest(session_id, reason))

    async def wait_ended(self, session_id: uuid.UUID, within: float = 10.0) -> SessionEndReason:
        """The end reason of ``session_id``, once reported."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: session_id in self.ended)
        return self.ended[session_id][0]

    async def wait_heartbeat(self, within: float = 10.0) -> None:
        """Until one more heartbeat arrives."""
        seen = len(self.heartbeats)
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: len(self.heartbeats) > seen)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class TunnelClosed(Exception):
    """The gateway closed the tunnel; ``code`` and ``reason`` are the close frame's."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"tunnel closed: {code} {reason!r}")
        self.code = code
        self.reason = reason

    @property
    def status(self) -> int | None:
        """The Guacamole status, as guacamole-common-js reads it: ``parseInt(reason)``."""
        return int(self.reason) if self.reason.isdigit() else None


class WebSocketTunnelClient:
    """A client speaking ``Guacamole.WebSocketTunnel``'s protocol.

    :param ws: an open WebSocket (see :meth:`connect`).
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.uuid: str | None = None
        self.messages: list[str] = []
        #: Internal instructions received after the UUID (ping answers).
        self.internal: list[Instruction] = []
        self._parser = InstructionParser()
        self._queue: list[Instruction] = []

    @classmethod
    async def connect(
        cls,
        session: aiohttp.ClientSession,
        url: str,
        data: Mapping[str, str] | str,
        *,
        origin: str | None = None,
    ) -> WebSocketTunnelClient:
        """Open ``url + "?" + data`` as guacamole-common-js does."""
        query = data if isinstance(data, str) else urlencode(data)
        headers = {"Origin": origin} if origin else {}
        ws = await session.ws_connect(
            f"{url}?{query}", protocols=("guacamole",), headers=headers, autoclose=False
        )
        return cls(ws)

    async def read(self, within: float = 10.0) -> Instruction:
        """The next instruction that is not internal (the UUID is kept in :attr:`uuid`).

        :raises TunnelClosed: the gateway closed the tunnel.
        """
        async with asyncio.timeout(within):
            while True:
                while self._queue:
                    instruction = self._queue.pop(0)
                    if instruction.opcode != INTERNAL_OPCODE:
                        return instruction
                    if self.uuid is None and len(instruction.args) == 1:
                        self.uuid = instruction.args[0]
                    else:
                        self.internal.append(instruction)
                await self._receive()

    async def tunnel_id(self, within: float = 10.0) -> str:
        """The tunnel's UUID, the first instruction of an open tunnel (what follows is kept).

        :raises TunnelClosed: the gateway closed the tunnel instead.
        """
        async with asyncio.timeout(within):
            while self.uuid is None:
                first = self._queue[0] if self._queue else None
                if first is None:
                    await self._receive()
                elif first.opcode == INTERNAL_OPCODE and len(first.args) == 1:
                    self._queue.pop(0)
                    self.uuid = first.args[0]
                else:
                    raise AssertionError(f"the tunnel began with {first.opcode!r}, not its UUID")
        return self.uuid

    async def _receive(self) -> None:
        message = await self.ws.receive()
        if message.type is aiohttp.WSMsgType.TEXT:
            self.messages.append(message.data)
            self._queue += self._parser.feed_instructions(message.data)
            return
        if message.type is aiohttp.WSMsgType.CLOSE:
            await self.ws.close()
        raise TunnelClosed(self.ws.close_code, str(message.extra or ""))

    async def until(self, opcode: str, within: float = 10.0) -> list[Instruction]:
        """Every instruction up to and including the next ``opcode``."""
        seen: list[Instruction] = []
        async with asyncio.timeout(within):
            while not seen or seen[-1].opcode != opcode:
                seen.append(await self.read(within))
        return seen

    async def closed(self, within: float = 10.0) -> TunnelClosed:
        """Read until the gateway closes; the close it sent."""
        try:
            async with asyncio.timeout(within):
                while True:
                    await self.read(within)
        except TunnelClosed as closed:
            return closed

    async def send(self, opcode: str, *args: object) -> None:
        """Send one instruction as one message (what ``Tunnel.sendMessage`` does)."""
        await self.ws.send_str(encode(opcode, *args))

    async def ping(self, timestamp: int) -> None:
        """Send the internal ping guacamole-common-js sends every 500 ms."""
        await self.send(INTERNAL_OPCODE, "ping", timestamp)
