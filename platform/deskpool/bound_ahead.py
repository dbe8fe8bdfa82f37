"""Listeners asked for port 0 bound before the configuration is read, and the URLs naming them.

A listen address with port 0 (``API_ADDR=127.0.0.1:0``) gets a port the system picks, so nobody
can write in advance the browser-facing URLs that name it: the API's base URL the console is
given, the console's origin the API allows, the gateway's tunnel URL the API hands out. Port 0
would otherwise be useless in a process that serves the console and the API together.

``deskpool run`` (and ``deskpool dev``) therefore bind each listener of the process that asks
for port 0 before reading the configuration (:func:`bind_listeners_ahead`, through
:func:`deskpool.listener.bind_ahead`: the listener later serves the socket bound then, so no
other program can take the port in between), and :func:`derive_public_urls` sets those of the
following settings that are not set and that name such a listener of the process:

- ``WEB_PUBLIC_API_BASE_URL``: ``http://`` the address the api bound;
- ``API_CORS_ALLOWED_ORIGINS``: ``http://`` the address the web component bound;
- ``GATEWAY_PUBLIC_WS_URL``: ``ws://`` the address the gateway bound, ``/websocket-tunnel``.

A wildcard host (``0.0.0.0``, ``::``) is named as loopback. A setting given explicitly is never
changed, and nothing is derived for a listener given a port of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import voluptuous as vol

from deskpool.config import HostPort, parse_listen_address
from deskpool.listener import bind_ahead

__all__ = ["TUNNEL_PATH", "bind_listeners_ahead", "derive_public_urls"]

#: The gateway's tunnel path (the gateway's default).
TUNNEL_PATH = "/websocket-tunnel"
#: The listen address setting of each component that listens.
LISTEN_SETTINGS = {"api": "API_ADDR", "gateway": "GATEWAY_ADDR", "web": "WEB_ADDR"}
#: The ops listener's setting: every process runs it.
OPS_SETTING = "METRICS_ADDR"
#: The URL settings derived from a listener on port 0: ``{setting: (listener, scheme, path)}``.
DERIVED = {
    "WEB_PUBLIC_API_BASE_URL": ("API_ADDR", "http", ""),
    "API_CORS_ALLOWED_ORIGINS": ("WEB_ADDR", "http", ""),
    "GATEWAY_PUBLIC_WS_URL": ("GATEWAY_ADDR", "ws", TUNNEL_PATH),
}
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def _listen_address(environ: Mapping[str, str], name: str) -> HostPort | None:
    try:
        return parse_listen_address(environ.get(name) or "")
    except vol.Invalid:
        return None  # unset, or wrong: the configuration says so when it is read


def bind_listeners_ahead(
    environ: Mapping[str, str], components: Sequence[str]
) -> tuple[dict[str, str], frozenset[str]]:
    """Bind now each listener of ``components`` (and the ops listener) that asks for port 0.

    :returns: ``environ`` with those listen addresses set to what they bound, and the names of
        the settings bound here.
    """
    bound = dict(environ)
    names = [LISTEN_SETTINGS[name] for name in components if name in LISTEN_SETTINGS]
    ahead: set[str] = set()
    for name in [*names, OPS_SETTING]:
        address = _listen_address(environ, name)
        if address is not None and address.port == 0:
            bound[name] = str(bind_ahead(address))
            ahead.add(name)
    return bound, frozenset(ahead)


def derive_public_urls(environ: Mapping[str, str], bound_ahead: frozenset[str]) -> dict[str, str]:
    """``environ``, with the URL settings not set that name a listener in ``bound_ahead`` set.

    :param bound_ahead: the listen address settings :func:`bind_listeners_ahead` bound.
    """
    derived = dict(environ)
    for setting, (listener, scheme, path) in DERIVED.items():
        address = _listen_address(environ, listener)
        if environ.get(setting) or listener not in bound_ahead or address is None:
            continue
        named = HostPort(_WILDCARDS.get(address.host, address.host), address.port)
        derived[setting] = f"{scheme}://{named}{path}"
    return derived
