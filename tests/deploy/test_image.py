"""The container image, built with podman from a local base, runs deskpool for real.

One image; the migration and each component (api, worker, gateway, web) run in containers of
their own on the host's network, against this machine's PostgreSQL and Redis (a fresh database)
and the test issuer. The desktop daemon simulator stands in for guacd, from the same image. Every
listener binds port 0: the containers start one after the other, each told the addresses the
ones before it bound (the gateway's for the API's tunnel URL, the API's for the console). The
test then opens a desktop through the REST API and the gateway's tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.processes import ANY_PORT, until
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.services import ServiceAddresses
from deskpool.testing.tunnels import WebSocketTunnelClient
from tests.deploy.podman import (
    Containers,
    addresses_folder,
    bound_addresses,
    build_image,
    podman,
    printed_address,
    wait_http,
)
from tests.support.deploy import (
    REPO,
)

IMAGE = "localhost/deskpool:test"
COMPONENTS = ("api", "worker", "gateway", "web")
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def image() -> str:
    build_image(IMAGE)
    return IMAGE


@pytest.fixture
def database_url(test_servers: ServiceAddresses) -> Iterator[str]:
    """A fresh, unmigrated database: the image's ``migrate`` creates the schema."""
    with fresh_database(test_servers, "deskpool_image", migrated=False) as url:
        yield url


@pytest.fixture
async def issuer() -> AsyncIterator[TestIdentityProvider]:
    async with TestIdentityProvider() as idp:
        yield idp


@pytest.fixture
def containers(image: str) -> Iterator[Containers]:
    started = Containers(image)
    try:
        yield started
    finally:
        started.remove_all()


def service_environ(
    database_url: str, servers: ServiceAddresses, issuer: TestIdentityProvider
) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "KVSTORE_ADDR": servers.kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-image-{secrets.token_hex(4)}:",
        "SECRETS_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "AUTH_OIDC_ISSUER_URL": issuer.issuer_url,
        "AUTH_OIDC_AUDIENCE": issuer.audience,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": "admin@image.test",
        "POOL_RECONCILE_INTERVAL": "2s",
        # ws:// is allowed for development only; the gateway is reached on loopback here.
        "APP_ENV": "development",
        "LOG_LEVEL": "info",
    }


async def api_call(
    session: aiohttp.ClientSession, method: str, url: str, token: str, body: Any = None
) -> Any:
    async with session.request(
        method, url, json=body, headers={"Authorization": f"Bearer {token}"}
    ) as response:
        payload = await response.json(content_type=None)
        assert response.status < 300, (method, url, response.status, payload)
        return payload


async def wait_ready_desktop(
    session: aiohttp.ClientSession, api: str, token: str, pool_id: str
) -> None:
    states: list[str] = []

    async def ready() -> bool:
        page = await api_call(session, "GET", f"{api}/api/v1/desktops?pool_id={pool_id}", token)
        states[:] = [d["state"] for d in page["items"]]
        return "ready" in states

    try:
        await until(ready, "a desktop of the pool is ready", seconds=120, every=1)
    except AssertionError as late:
        raise AssertionError(f"{late}: {states}") from None


async def test_image_runs_migration_and_every_component_and_opens_a_desktop(
    containers: Containers,
    database_url: str,
    test_servers: ServiceAddresses,
    issuer: TestIdentityProvider,
    tmp_path: Path,
) -> None:
    env = service_environ(database_url, test_servers, issuer)
    migrate = await asyncio.to_thread(
        podman,
        "run", "--rm", "--network=host",
        *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
        containers.image, "migrate",
        timeout=120,
    )  # fmt: skip
    assert migrate.returncode == 0
    # Built without the vendor key: the build manifest is unsigned, and says so plainly.
    manifest = await asyncio.to_thread(
        podman, "run", "--rm", containers.image, "license", "manifest", "verify", check=False
    )
    assert manifest.stdout.startswith("unsigned"), manifest.stdout + manifest.stderr

    await asyncio.to_thread(
        containers.run,
        "deskpool-test-desktopd",
        ["-m", "deskpool.desktopd", ANY_PORT],
        {},
        entrypoint="python",
    )
    env |= {
        "API_ADDR": ANY_PORT,
        "GATEWAY_ADDR": ANY_PORT,
        "WEB_ADDR": ANY_PORT,
        "METRICS_ADDR": ANY_PORT,
        "DESKTOPD_ADDRESS": await printed_address("deskpool-test-desktopd"),
        "WEB_PUBLIC_OIDC_AUTHORITY": issuer.issuer_url,
        "WEB_PUBLIC_OIDC_CLIENT_ID": "deskpool-console",
    }
    # One after the other, each told where the ones before it listen.
    folder = addresses_folder(tmp_path)
    bound: dict[str, dict[str, str]] = {}
    for name in ("gateway", "api", "web", "worker"):
        if name == "api":
            env["GATEWAY_PUBLIC_WS_URL"] = f"ws://{bound['gateway']['gateway']}/websocket-tunnel"
        if name == "web":
            env["WEB_PUBLIC_API_BASE_URL"] = f"http://{bound['api']['api']}"
        container = f"deskpool-test-{name}"
        await asyncio.to_thread(containers.run, container, ["run", name], env, addresses=folder)
        bound[name] = await bound_addresses(folder, container)
    for name in COMPONENTS:
        try:
            await wait_http(f"http://{bound[name]['ops']}/readyz")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{containers.logs(f'deskpool-test-{name}')}") from None

    api = f"http://{bound['api']['api']}"
    gateway_url = env["GATEWAY_PUBLIC_WS_URL"]
    served = await wait_http(f"{api}/openapi.yaml")
    assert served == (REPO / "api" / "openapi" / "openapi.yaml").read_bytes()
    web = f"http://{bound['web']['web']}"
    console = (await wait_http(f"{web}/")).decode()
    config = json.loads(await wait_http(f"{web}/config.json"))
    assert config["apiBaseUrl"] == api
    assert '<div id="root">' in console or "<script" in console, console[:300]
    assert "console build was not found" not in console

    token = issuer.issue_token(
        "image-admin", claims={"email": "admin@image.test", "email_verified": True}
    )
    async with aiohttp.ClientSession() as session:
        cluster = await api_call(
            session, "POST", f"{api}/api/v1/clusters", token,
            {"name": "sim", "driver": "simulator", "endpoint": "simulator://image",
             "options": {"clone_seconds": 0.2, "boot_seconds": 0.2, "agent_seconds": 0.2}},
        )  # fmt: skip
        pool = await api_call(
            session, "POST", f"{api}/api/v1/pools", token,
            {"name": "image-pool", "cluster_id": cluster["id"], "template": "ubuntu-22.04",
             "kind": "non_persistent", "os_type": "linux", "min_size": 1, "spare": 0,
             "max_size": 2, "naming_pattern": "img-{n:02}"},
        )  # fmt: skip
        me = await api_call(session, "GET", f"{api}/api/v1/me", token)
        await api_call(
            session, "POST", f"{api}/api/v1/pools/{pool['id']}/entitlements", token,
            {"subject_type": "user", "subject_id": me["id"]},
        )  # fmt: skip
        await wait_ready_desktop(session, api, token, pool["id"])
        opened = await api_call(
            session, "POST", f"{api}/api/v1/me/pools/{pool['id']}/desktop", token
        )
        connection = opened["connection"]
        assert connection["url"] == gateway_url
        client = await WebSocketTunnelClient.connect(
            session, connection["url"], {"token": connection["token"]}
        )
        seen = await client.until("sync", within=30)
        opcodes = {instruction.opcode for instruction in seen}
        assert "size" in opcodes
        assert opcodes & {"img", "png"}, opcodes
        await client.ws.close()

    # A stop drains: each component exits 0 well within the stop timeout.
    for name in COMPONENTS:
        code, took = await asyncio.to_thread(containers.stop, f"deskpool-test-{name}")
        assert code == 0, containers.logs(f"deskpool-test-{name}")
        assert took < 45
