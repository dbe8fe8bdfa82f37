"""Who the client of a request is: its peer, or what trusted proxies say (``X-Forwarded-For``).

``API_TRUSTED_PROXIES`` lists the addresses and networks of the proxies in front of the api
(a load balancer, an ingress). A request's client address is:

- its peer address (the TCP connection's other end) when that peer is not a trusted proxy;
  whatever ``X-Forwarded-For`` it sends is ignored (anyone can write that header);
- otherwise the rightmost address of ``X-Forwarded-For`` (every such header, in order) that is
  not itself a trusted proxy: each trusted proxy appends the address it received the request
  from, so the addresses to the left of the first untrusted one were written by the client and
  prove nothing. When every address is a trusted proxy the leftmost counts; when the header is
  missing or the address read is not an address, the nearest trusted hop counts.

The rate limits (by address before authentication) and the audit's source address use it, and
the listener exempts trusted proxies from ``API_MAX_CONNECTIONS_PER_ADDRESS`` (every client
behind a proxy arrives from its address).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

import voluptuous
from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 address as IPv4), else ``None``."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class TrustedProxies:
    """The networks whose ``X-Forwarded-For`` is believed."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """Parse ``API_TRUSTED_PROXIES``: comma-separated addresses or CIDR networks.

        :raises voluptuous.Invalid: naming an entry that is neither.
        """
        networks = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise voluptuous.Invalid(
                    f"{entry!r} is not an IP address or a network (CIDR, like 10.0.0.0/8)"
                ) from None
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: str | Address | None) -> bool:
        """Whether ``address`` is one of the trusted proxies."""
        if not self.networks or address is None:
            return False
        parsed = _address(address) if isinstance(address, str) else address
        if parsed is None:
            return False
        return any(parsed in network for network in self.networks)

    def client_of(self, peer: str | None, forwarded_for: Iterable[str]) -> str | None:
        """The client address of a request from ``peer`` carrying ``forwarded_for`` headers."""
        if not self.trusts(peer):
            return peer
        hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
        nearest = peer
        for hop in reversed([hop for hop in hops if hop]):
            address = _address(hop)
            if address is None:
                return nearest
            if not self.trusts(address):
                return str(address)
            nearest = str(address)
        return nearest


#: The application's trusted proxies (``API_TRUSTED_PROXIES``).
TRUSTED_PROXIES_KEY = web.AppKey("trusted_proxies", TrustedProxies)
#: The request's client address, worked out once.
CLIENT_ADDRESS_KEY = web.RequestKey("client_address", str)


def client_address(request: web.Request) -> str | None:
    """The client address of ``request`` (see the module)."""
    known: str | None = request.get(CLIENT_ADDRESS_KEY)
    if known is not None:
        return known
    proxies = request.app.get(TRUSTED_PROXIES_KEY)
    if not isinstance(proxies, TrustedProxies):  # an application made without the setting
        proxies = TrustedProxies()
    address = proxies.client_of(request.remote, request.headers.getall("X-Forwarded-For", []))
    if address is not None:
        request[CLIENT_ADDRESS_KEY] = address
    return address
