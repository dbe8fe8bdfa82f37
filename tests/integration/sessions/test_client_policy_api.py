"""A pool's client policy through the pools API: defaults, partial changes, refusals, audit."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.pools import pool_body
from tests.support.sessions import details

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY
from deskpool.runtime import Runtime


async def test_the_client_policy_is_shown_changed_in_part_refused_when_bad_and_audited(
    client: Any, new_caller: Any, api_cluster: Any, pools_runtime: Runtime
) -> None:
    admin = await new_caller("pools:manage", "pools:read")
    cluster_id = await api_cluster()
    pool = pool_body(cluster_id, name=f"client-{uuid.uuid4().hex[:6]}", min_size=0, max_size=1)
    created = await client.post(
        "/api/v1/pools",
        json={**pool, "session_policy": {"client": {"printing": True}}},
        headers=admin.headers,
    )
    assert created.status == 201, await created.text()
    body = await created.json()
    expected = DEFAULT_CLIENT_POLICY.as_json()
    expected["printing"] = True
    assert body["session_policy"]["client"] == expected
    url = f"/api/v1/pools/{body['id']}"
    changed = await client.patch(
        url,
        json={
            "session_policy": {
                "client": {
                    "clipboard": {"to_browser": {"mode": "off"}},
                    "clipboard_ignored_typo": 1,
                }
            }
        },
        headers=admin.headers,
    )
    # An unknown member is refused at the edge, like any other.
    assert changed.status == 422, await changed.text()
    changed = await client.patch(
        url,
        json={
            "session_policy": {
                "client": {
                    "clipboard": {
                        "to_browser": {"mode": "off"},
                        "to_desktop": {"max_bytes": 20 * 1024 * 1024},
                    },
                    "watermark": {"enabled": True, "text": "{email} {time}"},
                }
            }
        },
        headers=admin.headers,
    )
    assert changed.status == 200, await changed.text()
    client_policy = (await changed.json())["session_policy"]["client"]
    assert client_policy["clipboard"] == {
        "to_browser": {"mode": "off", "max_bytes": 262144},
        "to_desktop": {"mode": "text", "max_bytes": 20 * 1024 * 1024},
    }
    assert client_policy["printing"] is True
    assert client_policy["watermark"]["enabled"] is True
    assert client_policy["watermark"]["text"] == "{email} {time}"
    assert client_policy["watermark"]["opacity"] == 0.15
    shown = await (await client.get(url, headers=admin.headers)).json()
    assert shown["session_policy"]["client"] == client_policy
    for bad, pointer in (
        ({"clipboard": {"to_desktop": {"mode": "images"}}}, "clipboard/to_desktop/mode"),
        ({"clipboard": {"to_browser": {"max_bytes": 0}}}, "clipboard/to_browser/max_bytes"),
        ({"file_transfer": {"max_file_bytes": -5}}, "file_transfer/max_file_bytes"),
        ({"watermark": {"text": "{password}"}}, "watermark/text"),
        ({"watermark": {"opacity": 2}}, "watermark/opacity"),
        ({"audio": {"microphone": "loud"}}, "audio/microphone"),
    ):
        refused = await client.patch(
            url, json={"session_policy": {"client": bad}}, headers=admin.headers
        )
        assert refused.status == 422, bad
        problem = await refused.json()
        pointers = [error["pointer"] for error in problem["errors"]]
        assert f"/session_policy/client/{pointer}" in pointers, problem
    async with pools_runtime.db.acquire() as connection:
        rows = await connection.fetch(
            "SELECT action, details FROM audit_events WHERE resource_id = $1 ORDER BY id",
            body["id"],
        )
    create = details(next(row["details"] for row in rows if row["action"] == "pool.create"))
    assert create["client_policy"]["printing"] is True
    updates = [details(row["details"]) for row in rows if row["action"] == "pool.update"]
    assert updates[-1]["client_policy"] == {
        "clipboard.to_desktop.max_bytes": [262144, 20 * 1024 * 1024],
        "clipboard.to_browser.mode": ["text", "off"],
        "watermark.enabled": [False, True],
        "watermark.text": [DEFAULT_CLIENT_POLICY.watermark.text, "{email} {time}"],
    }
