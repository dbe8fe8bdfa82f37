"""The pool API tests' helpers: pool bodies and models, desktops added to a pool, callers."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import asyncpg

from deskpool.clusters.repository import get_cluster
from deskpool.desktops import store as store_desktops
from deskpool.pools.model import DesktopState, OsType, Pool, PoolKind
from deskpool.runtime import Runtime
from deskpool.testing.processes import until

MakePool = Callable[..., Awaitable[Pool]]


def pool_model(cluster_id: uuid.UUID, **overrides: Any) -> Pool:
    """A valid pool on ``cluster_id`` with a unique name and naming pattern."""
    tag = secrets.token_hex(3)
    base = Pool(
        id=uuid.uuid4(),
        name=f"pool-{tag}",
        cluster_id=cluster_id,
        template="tpl-ubuntu",
        kind=PoolKind.NON_PERSISTENT,
        min_size=0,
        max_size=20,
        spare=0,
        naming_pattern=f"d{tag}-{{n:03}}",
        os_type=OsType.LINUX,
    )
    return replace(base, **overrides)


async def add_desktops(
    connection: asyncpg.Connection,
    pool: Pool,
    count: int,
    state: DesktopState = DesktopState.READY,
    **columns: Any,
) -> list[uuid.UUID]:
    """Insert ``count`` desktops into ``pool`` directly in ``state`` (with ``columns`` set)."""
    names = [f"{pool.naming_pattern.split('-')[0]}-{index:03}" for index in range(count)]
    names = [f"{name}-{secrets.token_hex(2)}" for name in names]
    desktops = await store_desktops.insert_desktops(connection, pool, names)
    ids = [desktop.id for desktop in desktops]
    assignments = ", ".join(f"{column} = ${index + 3}" for index, column in enumerate(columns))
    await connection.execute(
        f"""
        UPDATE desktops SET state = $2, vm_id = 'vm-' || name, template = 'tpl-ubuntu'
            {", " + assignments if assignments else ""}
         WHERE id = ANY($1::uuid[])
        """,
        ids,
        str(state),
        *columns.values(),
    )
    return ids


async def simulated_vms(runtime: Runtime, cluster_id: uuid.UUID, names: list[str]) -> list[str]:
    """Clone and start one VM of ``ubuntu-22.04`` per name on a simulated cluster.

    Returns their ids once each guest agent answers (a desktop is shown from then on).
    """
    record = await get_cluster(runtime.db, cluster_id)
    assert record is not None
    async with runtime.drivers.open(record) as driver:
        template = next(t for t in await driver.list_templates() if t.name == "ubuntu-22.04")
        ids = []
        for name in names:
            vm = await driver.clone(template.id, name=name, desktop_id=str(uuid.uuid4()))
            await driver.start(vm.id)
            ids.append(vm.id)
        for vm_id in ids:
            await until(partial(driver.agent_ping, vm_id), f"the guest agent of {vm_id} answers")
    return ids


async def ready_desktops(runtime: Runtime, pool: Pool, count: int) -> list[uuid.UUID]:
    """``count`` ready desktops of ``pool`` (stored, on a simulated cluster), each with a VM."""
    names = [f"s{secrets.token_hex(3)}-{n}" for n in range(count)]
    vm_ids = await simulated_vms(runtime, pool.cluster_id, names)
    async with runtime.db.acquire() as connection:
        desktops = await store_desktops.insert_desktops(connection, pool, names)
        for desktop, vm_id in zip(desktops, vm_ids, strict=True):
            await connection.execute(
                "UPDATE desktops SET state = 'ready', vm_id = $2, template = $3 WHERE id = $1",
                desktop.id,
                vm_id,
                pool.template,
            )
    return [desktop.id for desktop in desktops]


async def add_user(connection: asyncpg.Connection) -> str:
    """A new user's id."""
    user_id = await connection.fetchval(
        "INSERT INTO users (issuer, subject) VALUES ('https://issuer.test', $1) RETURNING id",
        f"user-{secrets.token_hex(6)}",
    )
    return str(user_id)


def pool_body(cluster_id: str, /, **changes: Any) -> dict[str, Any]:
    """A valid creation body for a Linux pool of the simulator's Ubuntu template."""
    tag = uuid.uuid4().hex[:6]
    return {
        "name": f"lab-{tag}",
        "cluster_id": cluster_id,
        "template": "ubuntu-22.04",
        "kind": "non_persistent",
        "os_type": "linux",
        "max_size": 10,
        "naming_pattern": f"l{tag}-{{n:02}}",
        **changes,
    }


Headers = dict[str, str]


@dataclass(frozen=True)
class Caller:
    """A signed-in test user: its id and authorization headers."""

    id: str
    headers: Headers


#: The gateway tunnel URL the pool API tests hand out with connection tokens.
TUNNEL_URL = "wss://gateway.deskpool.test/tunnel"
