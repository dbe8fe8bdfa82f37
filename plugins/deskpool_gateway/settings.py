"""The gateway's own settings, and the values it derives from the configuration.

The gateway declares SPEC.md's ``GATEWAY_ADDR``, ``DESKTOPD_ADDRESS`` and ``DESKTOPD_LOG_LEVEL``
(``GATEWAY_PUBLIC_WS_URL`` is the platform's: the API hands it out) and what SPEC.md leaves to
the implementation: allowed browser origins, the operator-wide idle and session-length ceilings,
the daemon handshake and first-frame deadlines, the input held while the daemon connects, the
per-process tunnel limit, the drain deadline at SIGTERM and
the session lease.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import voluptuous as vol

from deskpool.config import (
    Config,
    HostPort,
    SettingRegistry,
    is_loopback_host,
    parse_choice,
    parse_duration,
    parse_host_port,
    parse_int,
    parse_list,
    parse_listen_address,
)

__all__ = ["GatewaySettings", "declare_settings", "origin_of"]

SECTION = "Gateway and desktop daemon"

#: The tunnel's path; the path of ``GATEWAY_PUBLIC_WS_URL`` is served too.
TUNNEL_PATH = "/websocket-tunnel"


def _parse_origins(text: str) -> tuple[str, ...]:
    origins = parse_list(text)
    for origin in origins:
        if origin != "*" and origin_of(origin) != origin:
            raise vol.Invalid(f"expected origins like https://console.example.com, got {origin!r}")
    return origins


def declare_settings(registry: SettingRegistry) -> None:
    """Declare the gateway's settings."""
    section = registry.section(SECTION, owner="deskpool-gateway")

    def add(name: str, parse: Callable[[str], Any], default: str, text: str, kind: str) -> None:
        section.add(name, parse, default, text, type_name=kind)

    add(
        "GATEWAY_ADDR", parse_listen_address, "0.0.0.0:8081", "Gateway listen address.", "host:port"
    )
    add(
        "DESKTOPD_ADDRESS",
        parse_host_port,
        "desktopd:4822",
        "host:port of the remote desktop protocol daemon (guacd).",
        "host:port",
    )
    add(
        "DESKTOPD_LOG_LEVEL",
        parse_choice("trace", "debug", "info", "warning", "error"),
        "info",
        "Log level of the bundled daemon container. Separate from `LOG_LEVEL`; not read by the "
        "service.",
        "choice",
    )
    add(
        "GATEWAY_ALLOWED_ORIGINS",
        _parse_origins,
        "",
        "Browser origins allowed to open a tunnel (comma-separated, `*` for any). Empty: the "
        "origin of `GATEWAY_PUBLIC_WS_URL` (as http/https), of `WEB_PUBLIC_API_BASE_URL` and "
        "the origins of `API_CORS_ALLOWED_ORIGINS`, plus loopback origins when `APP_ENV` is "
        "`development`. A request without `Origin` (not a browser) is not refused.",
        "list",
    )
    add(
        "GATEWAY_IDLE_TIMEOUT",
        parse_duration,
        "0s",
        "Longest time without user input before a tunnel is closed, for every session; a "
        "pool's session policy may set a shorter one. `0s`: no gateway-wide limit.",
        "duration",
    )
    add(
        "GATEWAY_MAX_SESSION_DURATION",
        parse_duration,
        "0s",
        "Longest a tunnel stays open, for every session; a pool's session policy may set a "
        "shorter one. `0s`: no gateway-wide limit.",
        "duration",
    )
    add(
        "GATEWAY_HANDSHAKE_TIMEOUT",
        parse_duration,
        "15s",
        "How long the desktop daemon has to accept the connection and complete the handshake "
        "(guacd's own timeout is 15 s).",
        "duration",
    )
    add(
        "GATEWAY_FIRST_FRAME_TIMEOUT",
        parse_duration,
        "5s",
        "How long the desktop daemon has, after the handshake, to draw its first frame (a "
        "`sync` ending a frame that drew something on screen; guacd's bare `sync` before "
        "anything is drawn, as on a refused RDP login, is not one); a daemon that draws "
        "nothing by then ends the tunnel with `UPSTREAM_TIMEOUT` (514). Raise it for remote "
        "desktops slow to answer (an RDP host with slow logons). `0s`: no limit (a silent "
        "daemon is still closed after 15 s).",
        "duration",
    )
    add(
        "GATEWAY_HELD_INPUT_LIMIT",
        parse_int(1024, 16 * 1024 * 1024),
        "262144",
        "Most characters of browser input (size, keys, mouse, clipboard, file streams) the "
        "gateway holds while the desktop daemon connects, to forward once it drew its first "
        "frame; more ends the tunnel with `CLIENT_OVERRUN` (781).",
        "integer",
    )
    add(
        "GATEWAY_MAX_TUNNELS",
        parse_int(1, 1_000_000),
        "5000",
        "Most tunnels one gateway process holds open; more are refused with "
        "`CLIENT_TOO_MANY` (797).",
        "integer",
    )
    add(
        "GATEWAY_SHUTDOWN_TIMEOUT",
        parse_duration,
        "20s",
        "At SIGTERM: how long open tunnels get to end on their own before the gateway closes "
        "them (`UPSTREAM_UNAVAILABLE`, 520; the session ends as `gateway_shutdown`). The "
        "supervisor's stop timeout must exceed it.",
        "duration",
    )
    add(
        "GATEWAY_LEASE_DURATION",
        parse_duration,
        "30s",
        "How long a gateway's sessions stay open without a heartbeat from it (the gateway "
        "heartbeats every third of it); a gateway killed with SIGKILL loses its sessions then.",
        "duration",
    )


def origin_of(url: str) -> str:
    """The origin (``scheme://host[:port]``) of ``url``; WebSocket schemes become HTTP ones."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default_port = {"http": 80, "https": 443}.get(scheme)
    try:
        port = parts.port
    except ValueError:
        return ""
    suffix = f":{port}" if port is not None and port != default_port else ""
    return f"{scheme}://{host}{suffix}" if scheme and host else ""


def _is_loopback(origin: str) -> bool:
    return is_loopback_host(urlsplit(origin).hostname or "")


@dataclass(frozen=True)
class GatewaySettings:
    """What the gateway reads from the configuration, once."""

    daemon: HostPort
    public_url: str
    allowed_origins: frozenset[str]
    any_origin: bool
    loopback_origins: bool
    idle_timeout: float | None
    max_duration: float | None
    handshake_timeout: float
    first_frame_timeout: float | None
    held_input_limit: int
    max_tunnels: int
    shutdown_timeout: float
    lease: float

    @classmethod
    def from_config(cls, config: Config) -> GatewaySettings:
        """Read and derive the settings."""
        explicit: tuple[str, ...] = config["GATEWAY_ALLOWED_ORIGINS"]
        development = str(config.get("APP_ENV", "")).lower() == "development"
        if explicit:
            origins = set(explicit) - {"*"}
        else:
            candidates = [
                config["GATEWAY_PUBLIC_WS_URL"],
                config.get("WEB_PUBLIC_API_BASE_URL", ""),
                *config.get("API_CORS_ALLOWED_ORIGINS", ()),
            ]
            origins = {origin_of(url) for url in candidates if url and url != "*"} - {""}
        idle = config.duration("GATEWAY_IDLE_TIMEOUT")
        longest = config.duration("GATEWAY_MAX_SESSION_DURATION")
        return cls(
            daemon=config.typed("DESKTOPD_ADDRESS", HostPort),
            public_url=config["GATEWAY_PUBLIC_WS_URL"],
            allowed_origins=frozenset(origins),
            any_origin="*" in explicit,
            loopback_origins=development and not explicit,
            idle_timeout=idle or None,
            max_duration=longest or None,
            handshake_timeout=config.duration("GATEWAY_HANDSHAKE_TIMEOUT"),
            first_frame_timeout=config.duration("GATEWAY_FIRST_FRAME_TIMEOUT") or None,
            held_input_limit=config["GATEWAY_HELD_INPUT_LIMIT"],
            max_tunnels=config["GATEWAY_MAX_TUNNELS"],
            shutdown_timeout=config.duration("GATEWAY_SHUTDOWN_TIMEOUT"),
            lease=config.duration("GATEWAY_LEASE_DURATION"),
        )

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether a browser at ``origin`` may open a tunnel (no ``Origin``: not a browser)."""
        if origin is None or self.any_origin:
            return True
        if origin in self.allowed_origins:
            return True
        return self.loopback_origins and _is_loopback(origin)

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths the tunnel is served at."""
        public = urlsplit(self.public_url).path.rstrip("/") if self.public_url else ""
        return tuple(dict.fromkeys(path for path in (TUNNEL_PATH, public) if path))

    def effective_limit(self, ceiling: float | None, policy: float | None) -> float | None:
        """The shorter of the gateway's ceiling and a pool policy's limit (``None``: none)."""
        limits = [value for value in (ceiling, policy) if value]
        return min(limits) if limits else None
