"""The gateway's Prometheus metrics, on the process's registry (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GatewayMetrics"]

_SESSION_BUCKETS = (1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400)
_HANDSHAKE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15)


class GatewayMetrics:
    """Open tunnels, refusals and handshake failures by cause, bytes relayed, session lengths.

    :param registry: the process's registry (``runtime.metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.open_tunnels = Gauge(
            "deskpool_gateway_open_tunnels",
            "Tunnels this gateway process holds open.",
            registry=registry,
        )
        self.max_tunnels = Gauge(
            "deskpool_gateway_max_tunnels",
            "GATEWAY_MAX_TUNNELS: the tunnels this process accepts before refusing (saturation "
            "is open_tunnels / max_tunnels).",
            registry=registry,
        )
        self.failures = Counter(
            "deskpool_gateway_handshake_failures",
            "Tunnels refused or failed, by cause (origin, no_token, bad_request, too_many, "
            "shutting_down, token_<reason>, daemon_unreachable, daemon_timeout, "
            "daemon_refused, daemon_protocol, daemon_first_frame, held_input_overflow, "
            "daemon_hang_up: the daemon's connection ended without disconnect).",
            ["reason"],
            registry=registry,
        )
        self.handshake_seconds = Histogram(
            "deskpool_gateway_handshake_seconds",
            "Time from the WebSocket upgrade to the daemon's ready (token redemption included).",
            buckets=_HANDSHAKE_BUCKETS,
            registry=registry,
        )
        relayed = Counter(
            "deskpool_gateway_relayed_bytes",
            "Bytes relayed, by direction (to_desktop, to_browser).",
            ["direction"],
            registry=registry,
        )
        self.bytes_to_desktop = relayed.labels("to_desktop")
        self.bytes_to_browser = relayed.labels("to_browser")
        self.session_seconds = Histogram(
            "deskpool_gateway_session_duration_seconds",
            "How long tunnels stayed open, by end reason.",
            ["reason"],
            buckets=_SESSION_BUCKETS,
            registry=registry,
        )
        self.transfers = Counter(
            "deskpool_gateway_transfers",
            "Clipboard transfers, files, print jobs and refused streams the client policy "
            "governed, by kind and outcome (allowed, cut, refused).",
            ["kind", "outcome"],
            registry=registry,
        )

    def refused(self, reason: str) -> None:
        """Count a tunnel that did not open, and why."""
        self.failures.labels(reason).inc()
