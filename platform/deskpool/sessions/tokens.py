"""Connection tokens: where a desktop is shown, and the sealed single-use token that opens it.

Opening a desktop answers a token bound to the user, the desktop and the connection parameters
the server resolved through the cluster's driver (:func:`resolve_target`); the target is sealed
by the secret store for the context ``session.connection_token[<key hex>].target`` and stored
under the token's SHA-256, never the token itself. A token lives ``SESSION_TOKEN_TTL`` and is
redeemed once, by the gateway's broker (:mod:`deskpool.sessions.broker`). The use cases that
issue one (opening, reconnecting, shadowing) are :mod:`deskpool.sessions.service`.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime

import asyncpg

from deskpool.clusters.repository import get_cluster
from deskpool.desktops import store as store_desktops
from deskpool.drivers import DriverError, HypervisorDriver, deadline_after
from deskpool.errors import DeskpoolError, ServiceUnavailable
from deskpool.pools.model import Desktop, Pool
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext, SecretsUnavailable
from deskpool.sessions import store_addresses, store_tokens
from deskpool.sessions.model import (
    SessionPolicy,
    new_token,
    preferred_protocol,
    target_from_json,
    target_to_json,
    token_key,
    tunnel_url_problem,
)
from deskpool.sessions.tunnel import DesktopTarget

log = logging.getLogger(__name__)

#: The setting of a connection token's lifetime (declared by the ``api`` component).
TOKEN_TTL_SETTING = "SESSION_TOKEN_TTL"
#: Its default, when the process did not declare it.
DEFAULT_TOKEN_TTL = 60.0
#: How long the driver may take to say where a desktop is shown.
TARGET_TIMEOUT = 20.0
#: The secret kind of a sealed connection target.
TOKEN_SECRET_KIND = "session.connection_token"


class GatewayNotConfigured(ServiceUnavailable):
    """``GATEWAY_PUBLIC_WS_URL`` is unset, or not ``wss://`` outside development (503)."""

    code = "gateway_not_configured"
    title = "Desktop access is not configured"


class DesktopUnreachable(ServiceUnavailable):
    """The driver could not say where the desktop is shown (not running, no address yet)."""

    code = "desktop_unreachable"
    title = "Desktop not reachable"


def token_context(key: bytes) -> SecretContext:
    """The secret context a token's target is sealed for."""
    return SecretContext.of(TOKEN_SECRET_KIND, key.hex(), "target")


def tunnel_url(runtime: Runtime) -> str:
    """``GATEWAY_PUBLIC_WS_URL``, checked; with a master key to seal tokens.

    :raises GatewayNotConfigured: the URL is unset, or not ``wss://`` outside development.
    :raises SecretsUnavailable: no master key seals tokens.
    """
    config = runtime.config
    url = str(config["GATEWAY_PUBLIC_WS_URL"])
    problem = tunnel_url_problem(url, str(config["APP_ENV"]))
    if problem is not None:
        raise GatewayNotConfigured(problem)
    if runtime.secret_store.current_key_id is None:
        raise SecretsUnavailable(
            "SECRETS_MASTER_KEY is not set: connection tokens cannot be sealed."
        )
    return url


def token_ttl(runtime: Runtime) -> float:
    """``SESSION_TOKEN_TTL`` in seconds."""
    if TOKEN_TTL_SETTING in runtime.config:
        return runtime.config.duration(TOKEN_TTL_SETTING)
    return DEFAULT_TOKEN_TTL


#: The secret kind of a desktop's recorded address.
ADDRESS_SECRET_KIND = "desktop.address"


def address_context(desktop_id: uuid.UUID) -> SecretContext:
    """The secret context a desktop's recorded address is sealed for."""
    return SecretContext.of(ADDRESS_SECRET_KIND, desktop_id, "target")


def seal_address(runtime: Runtime, desktop_id: uuid.UUID, target: DesktopTarget) -> bytes:
    """``target`` sealed as the recorded address of ``desktop_id``."""
    document = json.dumps(target_to_json(target)).encode()
    return runtime.secret_store.encrypt(document, address_context(desktop_id))


def open_address(runtime: Runtime, desktop_id: uuid.UUID, sealed: bytes) -> DesktopTarget | None:
    """The recorded address, or ``None`` when it cannot be opened (a key retired since)."""
    try:
        document = runtime.secret_store.decrypt(sealed, address_context(desktop_id))
        return target_from_json(json.loads(document))
    except (DeskpoolError, ValueError, KeyError) as error:
        log.warning("the recorded address of desktop %s cannot be opened: %s", desktop_id, error)
        return None


def preference_of(policy: SessionPolicy) -> str:
    """The protocol an address is recorded for (``""``: the driver's default)."""
    return preferred_protocol(policy) or ""


async def ask_target(
    runtime: Runtime,
    desktop: Desktop,
    policy: SessionPolicy,
    driver: HypervisorDriver,
) -> DesktopTarget:
    """Ask ``driver`` where the desktop is shown, and record the answer as its address.

    :raises DriverError: the driver could not say.
    """
    assert desktop.vm_id is not None
    endpoint = await driver.desktop_endpoint(
        desktop.vm_id, preferred_protocol(policy), deadline=deadline_after(TARGET_TIMEOUT)
    )
    target = DesktopTarget(
        protocol=str(endpoint.protocol),
        hostname=endpoint.host,
        port=endpoint.port,
        parameters={**endpoint.parameters, **endpoint.credentials},
    )
    await store_addresses.put_address(
        runtime.db,
        desktop.id,
        vm_id=desktop.vm_id,
        preference=preference_of(policy),
        sealed=seal_address(runtime, desktop.id, target),
    )
    return target


async def resolve_target(
    runtime: Runtime, desktop: Desktop, pool: Pool, policy: SessionPolicy
) -> DesktopTarget:
    """Where the desktop is shown: its recorded address, else its cluster driver's answer.

    The address is recorded when the desktop becomes ready (and forgotten when its driver
    reports its VM changed); a desktop without one has its driver asked
    (``desktop_endpoint``) and the answer recorded. The pool's protocol is a preference: the
    driver answers the protocol the guest offers (a Windows guest is shown with RDP whatever
    the pool prefers).

    :raises DesktopUnreachable: the VM does not run, has no address yet, or the driver fails.
    """
    if desktop.vm_id is None:
        raise DesktopUnreachable(f"desktop {desktop.name} has no VM yet", headers=_RETRY)
    async with runtime.db.acquire() as connection:
        sealed = await store_addresses.get_address(
            connection, desktop.id, vm_id=desktop.vm_id, preference=preference_of(policy)
        )
        known = None if sealed is None else open_address(runtime, desktop.id, sealed)
        if known is not None:
            return known
        record = await store_desktops.get_desktop_record(connection, desktop.id)
        if record is None:
            raise DesktopUnreachable(f"desktop {desktop.name} has no VM yet", headers=_RETRY)
        cluster = await get_cluster(connection, record.cluster_id)
    if cluster is None:
        raise DesktopUnreachable(f"the cluster of desktop {desktop.name} is gone")
    try:
        async with runtime.drivers.open(cluster) as driver:
            return await ask_target(runtime, desktop, policy, driver)
    except (DriverError, DeskpoolError) as error:
        raise DesktopUnreachable(
            f"desktop {desktop.name} cannot be reached now ({error.code}: {error.detail}); "
            "try again shortly",
            headers=_RETRY,
        ) from None


_RETRY = {"Retry-After": "5"}


def seal_token(runtime: Runtime, target: DesktopTarget) -> tuple[str, bytes, bytes]:
    """A new token, the key it is stored under, and ``target`` sealed for it."""
    token = new_token()
    key = token_key(token)
    sealed = runtime.secret_store.encrypt(
        json.dumps(target_to_json(target)).encode(), token_context(key)
    )
    return token, key, sealed


async def issue_token(
    runtime: Runtime,
    connection: asyncpg.Connection,
    *,
    user_id: uuid.UUID,
    desktop: Desktop,
    target: DesktopTarget,
    shadow_of: uuid.UUID | None = None,
    logon_id: uuid.UUID | None = None,
) -> tuple[str, datetime]:
    """Store a new single-use token for ``target``; return it and its expiry."""
    token, key, sealed = seal_token(runtime, target)
    expires_at = await store_tokens.insert_token(
        connection,
        key,
        user_id=user_id,
        desktop_id=desktop.id,
        pool_id=desktop.pool_id,
        protocol=target.protocol,
        sealed_target=sealed,
        ttl=token_ttl(runtime),
        shadow_of=shadow_of,
        logon_id=logon_id,
    )
    return token, expires_at
