"""A cluster's API token, given through the API, is nowhere in the database in clear.

The cluster is a Proxmox VE cluster (the driver against its API fake) when the ``proxmox``
driver is installed, and the simulator given a token of the same shape in any case. The token
is created, used for a check, and rotated; then every row of every table of the database is
dumped as text and searched for either plaintext, in clear, hex and base64.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from tests.secret_leak_guard import LeakGuard
from tests.support.clusters import (
    Callers,
)

from deskpool.clusters import driver_manager_for
from deskpool.runtime import Runtime

TOKEN_ID = "deskpool@pve!api-test"


async def dump_every_table(runtime: Runtime) -> str:
    """Every row of every table of the public schema, as JSON text, one line per row."""
    tables = await runtime.db.fetch(
        """
        SELECT table_name FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
         ORDER BY table_name
        """
    )
    lines = []
    for table in tables:
        name = table["table_name"].replace('"', '""')
        rows = await runtime.db.fetch(f'SELECT row_to_json(t)::text AS line FROM "{name}" AS t')
        lines += [f"{table['table_name']}: {row['line']}" for row in rows]
    return "\n".join(lines)


class TokenCluster:
    """A cluster that accepts one API token secret at a time, and the API body to reach it."""

    def __init__(self, fake: Any = None) -> None:
        self.fake = fake

    def accept(self, secret: str) -> None:
        """Make the cluster accept ``secret`` (and no other) for :data:`TOKEN_ID`."""
        if self.fake is not None:
            from deskpool_driver_proxmox.testing import FakeToken

            self.fake.tokens = {TOKEN_ID: FakeToken(secret)}

    def body(self, secret: str) -> dict[str, Any]:
        """The connection members of a cluster reached with ``secret``."""
        if self.fake is not None:
            return {
                "driver": "proxmox",
                "endpoint": self.fake.endpoint,
                "credentials": {"token_id": TOKEN_ID, "token_secret": secret},
            }
        return {
            "driver": "simulator",
            "endpoint": "simulator://local",
            "credentials": {"token": secret},
        }


@asynccontextmanager
async def token_cluster(driver: str) -> AsyncIterator[TokenCluster]:
    """A Proxmox VE API fake for ``proxmox``, else the simulator (which takes any token)."""
    if driver != "proxmox":
        yield TokenCluster()
        return
    from deskpool_driver_proxmox.testing import FakeProxmox

    async with FakeProxmox() as fake:
        yield TokenCluster(fake)


#: The simulator always; Proxmox VE too once its driver is installed.
DRIVERS = ["simulator"] + [
    entry_point.name
    for entry_point in importlib.metadata.entry_points(
        group="deskpool.hypervisor_drivers", name="proxmox"
    )
]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_no_table_holds_a_plaintext_token(
    client: Any, callers: Callers, clusters_runtime: Runtime, leak_guard: LeakGuard, driver: str
) -> None:
    assert driver in driver_manager_for(clusters_runtime).installed()
    first = leak_guard.plaintext("PLAINTEXT-MARKER-first")
    second = leak_guard.plaintext("PLAINTEXT-MARKER-second")
    responses: list[str] = []
    async with token_cluster(driver) as cluster:
        cluster.accept(first)
        created = await client.post(
            "/api/v1/clusters",
            json={"name": "pve", **cluster.body(first)},
            headers=callers.manager,
        )
        assert created.status == 201, await created.text()
        responses.append(await created.text())
        one = f"/api/v1/clusters/{(await created.json())['id']}"
        check = await client.post(f"{one}/check", headers=callers.manager)
        responses.append(await check.text())
        assert (await check.json())["ok"] is True, responses[-1]

        cluster.accept(second)
        rotate = {k: v for k, v in cluster.body(second).items() if k in ("credentials", "options")}
        rotated = await client.patch(one, json=rotate, headers=callers.manager)
        responses.append(await rotated.text())
        assert rotated.status == 200, responses[-1]
        check = await client.post(f"{one}/check", headers=callers.manager)
        responses.append(await check.text())
        assert (await check.json())["ok"] is True, responses[-1]
        for path in (one, "/api/v1/clusters", f"{one}/nodes", f"{one}/templates"):
            response = await client.get(path, headers=callers.reader)
            assert response.status == 200, path
            responses.append(await response.text())

    dump = await dump_every_table(clusters_runtime)
    assert "sealed_secrets:" in dump  # the credentials are there, sealed
    assert "clusters:" in dump
    assert "audit_events" in dump
    for secret in (first, second):
        assert secret not in dump
    plaintexts = [found for found in leak_guard.found_in(dump) if "plaintext" in found]
    assert plaintexts == []
    returned = "\n".join(responses)
    assert first not in returned
    assert second not in returned
    assert leak_guard.found_in(returned) == []
    # Only the token id (not a secret) may be anywhere, and only in the sealed document.
    assert TOKEN_ID not in dump
    assert json.loads(responses[0])["credentials"]["set"] is True
