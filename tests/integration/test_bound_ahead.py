"""Listeners on port 0 bound before the configuration is read, and the URLs derived from them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskpool import listener
from deskpool.bound_ahead import bind_listeners_ahead, derive_public_urls
from deskpool.config import parse_listen_address


@pytest.fixture(autouse=True)
def released() -> Iterator[None]:
    """Close what a test bound ahead and no listener served."""
    yield
    while listener._BOUND_AHEAD:
        listener._BOUND_AHEAD.popitem()[1].close()


def test_the_listeners_a_process_runs_on_port_0_are_bound_and_their_urls_derived() -> None:
    environ = {
        "API_ADDR": "127.0.0.1:0",
        "WEB_ADDR": "127.0.0.1:0",
        "GATEWAY_ADDR": "0.0.0.0:0",
        "METRICS_ADDR": "127.0.0.1:0",
    }
    bound, ahead = bind_listeners_ahead(environ, ["api", "worker", "gateway", "web"])
    assert ahead == {"API_ADDR", "WEB_ADDR", "GATEWAY_ADDR", "METRICS_ADDR"}
    ports = {name: parse_listen_address(bound[name]).port for name in ahead}
    assert 0 not in ports.values()
    assert len(set(ports.values())) == 4
    # Each is held by a socket the listener will serve.
    assert ("0.0.0.0", ports["GATEWAY_ADDR"]) in listener._BOUND_AHEAD
    urls = derive_public_urls(bound, ahead)
    assert urls["WEB_PUBLIC_API_BASE_URL"] == f"http://127.0.0.1:{ports['API_ADDR']}"
    assert urls["API_CORS_ALLOWED_ORIGINS"] == f"http://127.0.0.1:{ports['WEB_ADDR']}"
    # A wildcard host is named as loopback.
    assert urls["GATEWAY_PUBLIC_WS_URL"] == (
        f"ws://127.0.0.1:{ports['GATEWAY_ADDR']}/websocket-tunnel"
    )


def test_a_url_given_or_a_listener_given_its_port_or_not_run_is_left_alone() -> None:
    environ = {
        "API_ADDR": "127.0.0.1:0",
        "WEB_ADDR": "[::1]:0",
        "GATEWAY_ADDR": "127.0.0.1:0",
        "METRICS_ADDR": "",
        "WEB_PUBLIC_API_BASE_URL": "https://desk.example.com",
    }
    bound, ahead = bind_listeners_ahead(environ, ["api", "web"])
    assert ahead == {"API_ADDR", "WEB_ADDR"}  # the gateway is not run; the ops listener is off
    assert bound["GATEWAY_ADDR"] == "127.0.0.1:0"
    urls = derive_public_urls(bound, ahead)
    assert urls["WEB_PUBLIC_API_BASE_URL"] == "https://desk.example.com"
    web_port = parse_listen_address(bound["WEB_ADDR"]).port
    assert urls["API_CORS_ALLOWED_ORIGINS"] == f"http://[::1]:{web_port}"
    assert "GATEWAY_PUBLIC_WS_URL" not in urls
    fixed = {"API_ADDR": "127.0.0.1:8080", "WEB_ADDR": "127.0.0.1:8082"}
    kept, none = bind_listeners_ahead(fixed, ["api", "web"])
    assert none == frozenset()
    assert derive_public_urls(kept, none) == fixed
