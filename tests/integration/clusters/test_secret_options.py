"""Option values a driver declares secret are sealed like credentials and never shown back.

The simulator declares its ``required_token`` option (whole) and the ``password`` of its
``desktop`` option secret (driver contract 0.4). Given through the API among the options,
they are sealed apart from them, left out of every answer, and still reach the driver; a change
that leaves them out keeps them, ``null`` removes them; values stored in plain text before the
contract declared them secret are sealed when the API starts.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.clusters.test_clusters_api import CLUSTERS, create, simulator_cluster
from tests.integration.clusters.test_credentials_at_rest import dump_every_table
from tests.support.clusters import (
    Callers,
)

from deskpool.clusters import driver_manager_for, repository
from deskpool.clusters.service import seal_plain_secret_options
from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import served

TOKEN = "required-token-4f9c1d"
PASSWORD = "desktop-password-8a2e7b"
OPTIONS = {
    "required_token": TOKEN,
    "desktop": {"protocol": "vnc", "host": "10.0.0.5", "password": PASSWORD},
}


async def driver_settings(runtime: Runtime, cluster_id: str) -> Any:
    """The simulator's settings as the driver of the stored cluster reads them."""
    import uuid

    manager = driver_manager_for(runtime)
    record = await repository.get_cluster(runtime.db, uuid.UUID(cluster_id))
    assert record is not None
    async with manager.open(record) as driver:
        return driver.settings


async def check(client: Any, callers: Callers, cluster_id: str) -> bool:
    response = await client.post(f"{CLUSTERS}/{cluster_id}/check", headers=callers.manager)
    assert response.status == 200, await response.text()
    ok: bool = (await response.json())["ok"]
    return ok


async def test_secret_options_are_sealed_never_shown_and_reach_the_driver(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    body = simulator_cluster(credentials={"token": TOKEN}, options=OPTIONS)
    created = await create(client, callers.manager, body)
    assert created["options"] == {"desktop": {"protocol": "vnc", "host": "10.0.0.5"}}
    assert created["secret_options"]["set"] is True
    one = f"{CLUSTERS}/{created['id']}"
    for headers in (callers.reader, callers.manager):
        shown = await (await client.get(one, headers=headers)).text()
        listed = await (await client.get(CLUSTERS, headers=headers)).text()
        for text in (shown, listed):
            assert TOKEN not in text
            assert PASSWORD not in text
    # Nowhere in the database in clear; the audit trail names the pointers, not the values.
    dump = await dump_every_table(clusters_runtime)
    assert TOKEN not in dump
    assert PASSWORD not in dump
    details = await clusters_runtime.db.fetchval(
        "SELECT details FROM audit_events WHERE action = 'cluster.create' AND resource_id = $1",
        created["id"],
    )
    assert json.loads(details)["secret_options"] == ["/desktop/password", "/required_token"]
    # The driver reads them among its options.
    settings = await driver_settings(clusters_runtime, created["id"])
    assert settings.required_token == TOKEN
    assert settings.desktop.password == PASSWORD
    assert TOKEN not in repr(settings)
    assert await check(client, callers, created["id"])


async def test_a_change_keeps_what_it_leaves_out_and_null_removes_it(
    client: Any, callers: Callers, clusters_runtime: Runtime
) -> None:
    body = simulator_cluster(credentials={"token": "other"}, options=OPTIONS)
    created = await create(client, callers.manager, body)
    one = f"{CLUSTERS}/{created['id']}"
    assert not await check(client, callers, created["id"])  # "other" is not the required token

    # The console sends back what it was shown: the secrets stay.
    response = await client.patch(
        one, json={"options": created["options"] | {"seed": 7}}, headers=callers.manager
    )
    assert response.status == 200, await response.text()
    changed = await response.json()
    assert changed["options"]["seed"] == 7
    settings = await driver_settings(clusters_runtime, created["id"])
    assert (settings.required_token, settings.desktop.password) == (TOKEN, PASSWORD)

    # A new value replaces the stored one; null removes it; a json option gone takes its keys.
    response = await client.patch(
        one,
        json={"options": {"required_token": "other", "desktop": {"password": None}}},
        headers=callers.manager,
    )
    assert response.status == 200, await response.text()
    settings = await driver_settings(clusters_runtime, created["id"])
    assert (settings.required_token, settings.desktop.password) == ("other", None)
    assert await check(client, callers, created["id"])
    response = await client.patch(
        one, json={"options": {"required_token": None}}, headers=callers.manager
    )
    assert response.status == 200, await response.text()
    assert (await response.json())["secret_options"]["set"] is False
    assert await check(client, callers, created["id"])  # no token required any more


async def test_a_secret_option_of_the_wrong_kind_is_422_without_its_value(
    client: Any, callers: Callers
) -> None:
    response = await client.post(
        CLUSTERS,
        json=simulator_cluster(options={"required_token": ["not", "text"]}),
        headers=callers.manager,
    )
    assert response.status == 422
    text = await response.text()
    assert "/options/required_token" in text
    assert "not" not in json.loads(text)["errors"][0]["detail"]


async def test_values_stored_in_plain_text_before_are_sealed_at_the_api_start(
    client: Any,
    callers: Callers,
    clusters_runtime: Runtime,
    clusters_environ: dict[str, str],
    aiohttp_client: Any,
) -> None:
    created = await create(client, callers.manager, simulator_cluster(name="old"))
    # As a cluster stored before the contract declared these options secret.
    await clusters_runtime.db.execute(
        "UPDATE clusters SET options = $2::jsonb WHERE id = $1::uuid",
        created["id"],
        json.dumps(OPTIONS),
    )
    # Never shown, even before they are sealed.
    shown = await (await client.get(f"{CLUSTERS}/{created['id']}", headers=callers.reader)).text()
    assert TOKEN not in shown
    assert PASSWORD not in shown

    async with served(clusters_environ, aiohttp_client):
        pass  # an API starting seals them
    assert await seal_plain_secret_options(clusters_runtime) == 0  # once
    dump = await dump_every_table(clusters_runtime)
    assert TOKEN not in dump
    assert PASSWORD not in dump
    settings = await driver_settings(clusters_runtime, created["id"])
    assert (settings.required_token, settings.desktop.password) == (TOKEN, PASSWORD)
    actor = await clusters_runtime.db.fetchval(
        "SELECT actor FROM audit_events WHERE action = 'cluster.secret_options_sealed' "
        "AND resource_id = $1",
        created["id"],
    )
    assert actor == "system:seal-secret-options"
