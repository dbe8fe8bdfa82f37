"""The gateway tests' harness: a gateway component on a runtime of its own, and a browser's side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from deskpool.testing.processes import ANY_PORT
from deskpool.testing.tunnels import InMemorySessionBroker, WebSocketTunnelClient
from deskpool_gateway import GatewayComponent

ORIGIN = "https://console.example.com"


@dataclass
class GatewayHarness:
    """A running gateway, its broker and a client session."""

    component: GatewayComponent
    broker: InMemorySessionBroker
    session: aiohttp.ClientSession
    url: str

    async def open(
        self, token: str, *, origin: str | None = ORIGIN, **display: str
    ) -> WebSocketTunnelClient:
        """Connect to the tunnel with ``token`` (and display values) as a browser would."""
        return await WebSocketTunnelClient.connect(
            self.session, self.url, {"token": token, **display}, origin=origin
        )

    async def synced(self, **grant: Any) -> tuple[WebSocketTunnelClient, str]:
        """``(client, token)``: a tunnel opened with a new token of ``grant``, past a ``sync``."""
        token = self.broker.issue(**grant)
        client = await self.open(token)
        await client.until("sync")
        return client, token

    async def watched(self) -> tuple[WebSocketTunnelClient, str, WebSocketTunnelClient]:
        """``(owner, connection_id, watcher)``: a session past a ``sync``, joined read-only."""
        owner, owner_token = await self.synced()
        connection_id = self.connection_of(owner_token)
        watcher = await self.open(
            self.broker.issue(join_connection_id=connection_id, read_only=True)
        )
        return owner, connection_id, watcher

    def connection_of(self, token: str) -> str:
        """The desktop daemon's connection id of the session ``token`` opened."""
        return self.broker.connected[self.broker.grant_of(token).session_id]


def gateway_environ(daemon_address: str, **overrides: str) -> dict[str, str]:
    """The environment of a gateway process of these tests (no database is opened)."""
    return {
        "DATABASE_URL": "postgresql://deskpool@127.0.0.1:5432/unused",
        "KVSTORE_ADDR": "127.0.0.1:6379",
        "SECRETS_MASTER_KEY": "A" * 43 + "=",
        "GATEWAY_ADDR": ANY_PORT,
        "DESKTOPD_ADDRESS": daemon_address,
        "GATEWAY_PUBLIC_WS_URL": "wss://gateway.example.com/websocket-tunnel",
        "API_CORS_ALLOWED_ORIGINS": ORIGIN,
        "APP_ENV": "production",
        "GATEWAY_SHUTDOWN_TIMEOUT": "1s",
        **overrides,
    }
