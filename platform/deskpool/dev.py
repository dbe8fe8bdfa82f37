"""``deskpool dev``: the quick start in one process.

It migrates, starts a development OIDC issuer on loopback (fixed keys kept in the state folder,
so sign-ins survive restarts), points the API and the console at it, makes its administrator a
bootstrap admin (the issuer follows docs/operators/identity.md: the console signs in as the
client ``deskpool``, and the API accepts access tokens typed ``at+jwt`` for its own audience
``deskpool-api``, never the console's ID tokens), runs every component, and prints where
everything is and a ready-made token.
On a fresh database it then connects a simulated cluster and creates a small Linux pool through
the REST API, as an administrator would, so provisioning can be watched at once. When nothing
listens at ``DESKTOPD_ADDRESS`` (guacd is not packaged by Debian), it runs the desktop daemon
simulator (:mod:`deskpool.desktopd`) on loopback and points the gateway at it, and says so. It
is for a developer's machine only: anyone who reaches the issuer signs in.

Any listen address may ask for port 0 (``API_ADDR=127.0.0.1:0``, ``--issuer-port 0``...): the
listeners whose addresses the URLs above name are bound before those URLs are derived
(:func:`deskpool.bound_ahead.bind_listeners_ahead`), and ``LISTEN_ADDRESSES_FILE`` lists what
every one bound, the issuer (``issuer``) and a desktop daemon simulator (``desktopd``) included.

With ``--hypervisor libvirt`` the demo runs on real tiny VMs instead (:mod:`deskpool.dev_libvirt`):
the local libvirt (``qemu:///system``) gets a template domain booting the project's tiny guest,
the demo cluster is a ``libvirt`` one and the demo pool's desktops are its linked clones, and
the desktop daemon simulator bridges the VMs' VNC displays on loopback
(:mod:`deskpool.desktopd.vnc`), so "Open" shows a VM's console in the browser without guacd.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import voluptuous as vol

from deskpool.bound_ahead import TUNNEL_PATH, bind_listeners_ahead
from deskpool.config import parse_host_port, parse_listen_address
from deskpool.db import migrate
from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.desktopd.vnc import VncBridge
from deskpool.host import ALL_COMPONENTS, Host, bootstrap
from deskpool.testing.idp import DevIdentityProvider

log = logging.getLogger(__name__)

#: The development administrator the issuer signs in by default.
DEV_ADMIN_SUBJECT = "dev-admin"
DEV_ADMIN_EMAIL = "admin@deskpool.test"
#: The console's client id at the development issuer.
DEV_CLIENT_ID = "deskpool"
#: The group claim value of the issuer's desktop user, and the local group it is bound to.
DEV_USERS_CLAIM = "deskpool-users"
DEV_USERS_GROUP = "desktop-users"
#: The audience of the API's access tokens: the API's own, distinct from the console's client.
DEV_API_AUDIENCE = "deskpool-api"

#: The simulated cluster of a fresh development database: slow enough to watch.
DEMO_CLUSTER: dict[str, Any] = {
    "name": "simulator",
    "driver": "simulator",
    "endpoint": "simulator://local",
    "options": {"clone_seconds": 3, "boot_seconds": 4, "agent_seconds": 2, "oobe_seconds": 8},
}
#: The pool created on it.
DEMO_POOL: dict[str, Any] = {
    "name": "demo-linux",
    "description": "Created by deskpool dev",
    "template": "ubuntu-22.04",
    "kind": "non_persistent",
    "os_type": "linux",
    "min_size": 2,
    "spare": 1,
    "max_size": 5,
    "naming_pattern": "demo-{n:02}",
}


def dev_environ(environ: Mapping[str, str], issuer_url: str) -> dict[str, str]:
    """The environment of the development process: the caller's, plus the dev issuer.

    The console (``WEB_ADDR``) calls the API (``API_ADDR``) from another origin: the API's base
    URL and the console's origins (by address and as ``localhost``) are set to match. Opened
    desktops' connection tokens point at the gateway on ``GATEWAY_ADDR`` (``ws://``, allowed
    because ``APP_ENV`` is ``development``).
    """
    api_addr = environ.get("API_ADDR") or "127.0.0.1:8080"
    web_addr = environ.get("WEB_ADDR") or "127.0.0.1:8082"
    web_port = web_addr.rpartition(":")[2]
    gateway_host, _, gateway_port = (environ.get("GATEWAY_ADDR") or "127.0.0.1:8081").rpartition(
        ":"
    )
    if gateway_host in ("0.0.0.0", "[::]", ""):
        gateway_host = "127.0.0.1"
    defaults = {
        # A clear-text tunnel is accepted only because APP_ENV is development here.
        "GATEWAY_PUBLIC_WS_URL": f"ws://{gateway_host}:{gateway_port}{TUNNEL_PATH}",
        "WEB_PUBLIC_API_BASE_URL": f"http://{api_addr}",
        "API_CORS_ALLOWED_ORIGINS": f"http://{web_addr},http://localhost:{web_port}",
        "AUTH_OIDC_ISSUER_URL": issuer_url,
        "AUTH_OIDC_AUDIENCE": DEV_API_AUDIENCE,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": DEV_ADMIN_EMAIL,
        "WEB_PUBLIC_OIDC_AUTHORITY": issuer_url,
        "WEB_PUBLIC_OIDC_CLIENT_ID": DEV_CLIENT_ID,
        "WEB_PUBLIC_OIDC_SCOPE": "openid profile email groups offline_access",
    }
    merged = dict(environ)
    for key, value in defaults.items():
        if not merged.get(key):
            merged[key] = value
    return merged


async def daemon_listens(address: str) -> bool:
    """Whether something accepts TCP connections at ``address`` (``host:port``)."""
    try:
        where = parse_host_port(address)
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(where.host, where.port)
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return True


async def desktop_daemon(
    environ: dict[str, str], bridge: VncBridge | None = None
) -> tuple[DesktopDaemonSimulator | None, str]:
    """Use the daemon at ``DESKTOPD_ADDRESS``, or start the simulator and point ``environ`` at it.

    :param bridge: the VNC servers the simulator bridges (none by default).
    :returns: the simulator started (``None`` when a daemon answered) and a line for the banner.
    """
    address = environ.get("DESKTOPD_ADDRESS") or "desktopd:4822"
    try:
        port = parse_listen_address(address).port if ":" in address else 4822
    except vol.Invalid:
        port = 4822
    if port and await daemon_listens(address):
        return None, f"  desktop      the desktop daemon at {address}"
    simulator = DesktopDaemonSimulator("127.0.0.1", port, vnc_bridge=bridge)
    try:
        await simulator.start()
    except OSError:
        simulator = DesktopDaemonSimulator("127.0.0.1", 0, vnc_bridge=bridge)
        await simulator.start()
    environ["DESKTOPD_ADDRESS"] = simulator.address
    bridging = " (bridging the VNC servers on loopback)" if bridge and bridge.networks else ""
    line = (
        f"  desktop      no desktop daemon listens at {address}: running the desktop daemon "
        f"simulator on {simulator.address}{bridging}"
    )
    return simulator, line


@dataclass(frozen=True)
class Demo:
    """What a fresh development database gets: a cluster and a pool on it."""

    cluster: dict[str, Any]
    pool: dict[str, Any]
    bridge: VncBridge | None = None


async def demo_for(hypervisor: str, libvirt_prefix: str) -> Demo:
    """The demo of ``--hypervisor`` (``simulator``, or ``libvirt``: its template made first)."""
    if hypervisor == "simulator":
        return Demo(DEMO_CLUSTER, DEMO_POOL)
    from deskpool.dev_libvirt import LIBVIRT_URI, libvirt_demo

    cluster, pool = await asyncio.to_thread(libvirt_demo, libvirt_prefix, LIBVIRT_URI)
    return Demo(cluster, pool, VncBridge.loopback())


async def run_dev(
    environ: Mapping[str, str],
    state_dir: Path,
    issuer_port: int,
    hypervisor: str = "simulator",
    libvirt_prefix: str = "deskpool-dev",
) -> None:
    """Migrate, start the dev issuer, run every component until SIGTERM/SIGINT.

    :param hypervisor: ``simulator`` (the default) or ``libvirt`` (real tiny VMs).
    :param libvirt_prefix: with ``libvirt``, the names of the template, its storage pool and
        the demo's desktops start with it.
    """
    demo = await demo_for(hypervisor, libvirt_prefix)
    issuer = DevIdentityProvider(state_dir / "dev-idp-keys.json", audience=DEV_API_AUDIENCE)
    await issuer.start("127.0.0.1", issuer_port)
    simulator: DesktopDaemonSimulator | None = None
    try:
        bound, _ = bind_listeners_ahead(environ, ALL_COMPONENTS)
        merged = dev_environ(bound, issuer.issuer_url)
        simulator, daemon_line = await desktop_daemon(merged, demo.bridge)
        process = bootstrap(merged, ALL_COMPONENTS)
        connection = await asyncpg.connect(process.config["DATABASE_URL"])
        try:
            for label in await migrate(connection):
                log.info("applied migration %s", label)
        finally:
            await connection.close()
        also_bound = {"issuer": urlsplit(issuer.issuer_url).netloc}
        if simulator is not None:
            also_bound["desktopd"] = simulator.address
        host = Host(process, also_bound)
        token = issuer.issue_token(
            DEV_ADMIN_SUBJECT, expires_in=8 * 3600, **issuer.users[DEV_ADMIN_SUBJECT].claims
        )
        config = process.config
        api = f"http://{config['API_ADDR']}"
        banner = "\n".join(
            [
                "",
                "deskpool dev is starting:",
                f"  console      http://{config['WEB_ADDR']}",
                f"  API          {api}   (docs: {api}/docs)",
                f"  OIDC issuer  {issuer.issuer_url}   (signs in {DEV_ADMIN_EMAIL})",
                f"  ops          http://{config['METRICS_ADDR']}/readyz",
                daemon_line,
                "  a token for the development administrator (valid 8 hours):",
                f"    curl -H 'Authorization: Bearer {token}' {api}/api/v1/me",
                "",
            ]
        )
        print(banner, flush=True)
        seeding = asyncio.create_task(seed_demo(api, token, demo), name="dev-seed")
        await host.run()
        seeding.cancel()
    finally:
        if simulator is not None:
            await simulator.stop()
        await issuer.stop()


async def seed_demo(api: str, token: str, demo: Demo | None = None) -> None:
    """Connect the demo cluster and create the demo pool, unless a cluster exists (said why)."""
    demo = demo or Demo(DEMO_CLUSTER, DEMO_POOL)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(base_url=api, headers=headers) as session:
        for _ in range(100):
            try:
                async with session.get("/api/v1/clusters") as response:
                    if response.status == 200:
                        clusters = await response.json()
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            log.warning("the API did not answer; no demo cluster was created")
            return
        if clusters["items"]:
            names = ", ".join(str(item.get("name")) for item in clusters["items"][:3])
            more = " and more" if clusters.get("next") or len(clusters["items"]) > 3 else ""
            count = len(clusters["items"])
            log.warning(
                "the %s demo cluster %r and its pool %r were not created: the database already "
                "has %d cluster%s (%s%s); use an empty database for the demo "
                "(DATABASE_URL=postgresql://.../another make run), or add a cluster from the "
                "console",
                demo.cluster["driver"],
                demo.cluster["name"],
                demo.pool["name"],
                count,
                "" if count == 1 else "s",
                names,
                more,
            )
            return
        async with session.post("/api/v1/clusters", json=demo.cluster) as response:
            if response.status != 201:
                log.warning("could not create the demo cluster: %s", await response.text())
                return
            cluster = await response.json()
        pool = {**demo.pool, "cluster_id": cluster["id"]}
        async with session.post("/api/v1/pools", json=pool) as response:
            if response.status != 201:
                log.warning("could not create the demo pool: %s", await response.text())
                return
            pool_id = (await response.json())["id"]
        await entitle_dev_users(session, pool_id)
        log.info(
            "created the %s cluster %r and the pool %r (min %d, spare %d): "
            "watch GET /api/v1/desktops",
            demo.cluster["driver"],
            demo.cluster["name"],
            demo.pool["name"],
            demo.pool["min_size"],
            demo.pool["spare"],
        )


async def entitle_dev_users(session: aiohttp.ClientSession, pool_id: str) -> None:
    """Entitle the administrator, and the issuer's desktop users (their group claim), to the pool.

    The ``deskpool-users`` claim value is bound to a local group ``desktop-users``, so the
    development desktop user opens the demo pool's desktops from the console's My desktops.
    """
    async with session.get("/api/v1/me") as response:
        admin_id = (await response.json())["id"]
    async with session.post(
        "/api/v1/groups", json={"key": DEV_USERS_GROUP, "name": "Desktop users"}
    ) as response:
        if response.status != 201:
            log.warning("could not create the desktop users group: %s", await response.text())
            return
        group_id = (await response.json())["id"]
    requests = [
        ("/api/v1/oidc-group-bindings", {"claim_value": DEV_USERS_CLAIM, "group_id": group_id}),
        (
            f"/api/v1/pools/{pool_id}/entitlements",
            {"subject_type": "user", "subject_id": admin_id},
        ),
        (
            f"/api/v1/pools/{pool_id}/entitlements",
            {"subject_type": "group", "subject_id": group_id},
        ),
    ]
    for path, body in requests:
        async with session.post(path, json=body) as response:
            if response.status >= 300:
                log.warning("demo set-up: %s answered %s", path, await response.text())
