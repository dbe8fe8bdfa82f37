"""The Proxmox VE API fake answers the way pveproxy and qemu-server do, over real HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from deskpool_driver_proxmox.testing import (
    DEFAULT_VERSION,
    TOKEN_ID,
    TOKEN_SECRET,
    FakeProxmox,
    FakeTimings,
    privileges_for,
)

AUTH = {"Authorization": f"PVEAPIToken={TOKEN_ID}={TOKEN_SECRET}"}
UPID = re.compile(r"UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:(\w+):(\d+):[^:]+:")


@pytest.fixture
async def fake() -> AsyncIterator[FakeProxmox]:
    async with FakeProxmox() as running:
        yield running


@pytest.fixture
async def http(fake: FakeProxmox) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=fake.endpoint) as session:
        yield session


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> tuple[int, str, Any]:
    async with http.request(
        method, f"/api2/json{path}", headers=AUTH if headers is None else headers, **kwargs
    ) as response:
        text = await response.text()
        body = await response.json(content_type=None) if text else None
        return response.status, response.reason or "", body


async def test_answers_are_data_envelopes(http: aiohttp.ClientSession) -> None:
    status, _, body = await call(http, "GET", "/version")
    assert status == 200
    assert body == {"data": {"version": "9.0.10", "release": "9.0", "repoid": "faa83925c9641325"}}
    assert DEFAULT_VERSION == "9.0.10"
    _, _, nodes = await call(http, "GET", "/nodes")
    assert [n["node"] for n in nodes["data"]] == ["pve1", "pve2"]
    _, _, nextid = await call(http, "GET", "/cluster/nextid")
    assert nextid == {"data": "100"}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "No ticket"),
        ({"Authorization": f"PVEAPIToken={TOKEN_ID}=wrong"}, "invalid token value!"),
        ({"Authorization": "Bearer abc"}, "No ticket"),
    ],
)
async def test_authentication(
    http: aiohttp.ClientSession, headers: dict[str, str], reason: str
) -> None:
    status, got_reason, body = await call(http, "GET", "/version", headers=headers)
    assert (status, got_reason) == (401, reason)
    assert body == {"data": None, "message": reason + "\n"}


async def test_unknown_methods_are_not_implemented(http: aiohttp.ClientSession) -> None:
    status, reason, _ = await call(http, "GET", "/nodes/pve1/nonsense")
    assert (status, reason) == (501, "Method 'GET /nodes/pve1/nonsense' not implemented")
    status, reason, _ = await call(http, "GET", "/version", data="x=1")
    assert (status, reason) == (501, "Unexpected content for method 'GET'")


async def test_parameters_are_verified(http: aiohttp.ClientSession) -> None:
    status, reason, body = await call(
        http, "POST", "/nodes/pve1/qemu/9000/clone", data={"name": "x", "colour": "red"}
    )
    assert (status, reason) == (400, "Parameter verification failed.")
    assert body["data"] is None
    assert body["errors"] == {
        "newid": "property is missing and it is not optional\n",
        "colour": "property is not defined in schema and the schema does not allow "
        "additional properties\n",
    }
    _, _, body = await call(
        http, "POST", "/nodes/pve1/qemu/9000/clone", data={"newid": "12", "full": "maybe"}
    )
    assert set(body["errors"]) == {"newid", "full"}
    _, _, body = await call(http, "GET", "/cluster/nextid", params={"vmid": "9000"})
    assert body["errors"] == {"vmid": "VM 9000 already exists\n"}


async def test_clone_checks_made_before_the_task(http: aiohttp.ClientSession) -> None:
    path = "/nodes/pve1/qemu/9000/clone"
    status, reason, _ = await call(
        http, "POST", path, data={"newid": "100", "full": "0", "storage": "local-lvm"}
    )
    assert (status, reason) == (500, "parameter 'storage' not allowed for linked clones")
    status, reason, _ = await call(http, "POST", path, data={"newid": "9001"})
    assert (status, reason) == (500, "unable to create VM 9001: config file already exists")
    status, reason, _ = await call(http, "POST", path, data={"newid": "100", "target": "pve9"})
    assert (status, reason) == (500, "no such cluster node 'pve9'")


async def test_a_vm_is_found_only_on_its_node(http: aiohttp.ClientSession) -> None:
    status, reason, _ = await call(http, "GET", "/nodes/pve2/qemu/9000/config")
    assert status == 500
    assert reason == "Configuration file 'nodes/pve2/qemu-server/9000.conf' does not exist"
    status, _, body = await call(http, "GET", "/nodes/pve1/qemu/9000/config")
    assert status == 200
    assert body["data"]["template"] == 1
    assert len(body["data"]["digest"]) == 40


async def test_tasks_have_upids_and_end_with_an_exit_status(
    fake: FakeProxmox, http: aiohttp.ClientSession
) -> None:
    fake.timings = FakeTimings(task_seconds=0.3)  # still running when its status is read
    _, _, body = await call(http, "POST", "/nodes/pve1/qemu/9000/status/start")
    upid = body["data"]
    match = UPID.fullmatch(upid)
    assert match is not None
    assert match.groups() == ("qmstart", "9000")
    task = await fake.started_tasks.get()
    assert task.upid == upid
    _, _, running = await call(http, "GET", f"/nodes/pve1/tasks/{upid}/status")
    assert running["data"]["status"] == "running"
    assert "exitstatus" not in running["data"]
    assert task.runner is not None
    await task.runner
    _, _, stopped = await call(http, "GET", f"/nodes/pve1/tasks/{upid}/status")
    assert stopped["data"]["status"] == "stopped"
    assert stopped["data"]["exitstatus"] == "you can't start a vm if it's a template"
    assert stopped["data"]["user"] == TOKEN_ID


async def test_a_running_vm_refuses_deletion_and_answers_its_agent(
    fake: FakeProxmox, http: aiohttp.ClientSession
) -> None:
    fake.add_vm(150, "running-one", running=True)
    status, reason, _ = await call(http, "DELETE", "/nodes/pve1/qemu/150")
    assert (status, reason) == (500, "VM 150 is running - destroy failed")
    _, _, ping = await call(http, "POST", "/nodes/pve1/qemu/150/agent/ping")
    assert ping == {"data": {"result": {}}}
    _, _, osinfo = await call(http, "GET", "/nodes/pve1/qemu/150/agent/get-osinfo")
    assert osinfo["data"]["result"]["id"] == "ubuntu"
    fake.silence_agent(150)
    status, reason, _ = await call(http, "POST", "/nodes/pve1/qemu/150/agent/ping")
    assert (status, reason) == (500, "QEMU guest agent is not running")
    fake.add_vm(151, "stopped-one", running=False)
    status, reason, _ = await call(http, "POST", "/nodes/pve1/qemu/151/agent/ping")
    assert (status, reason) == (500, "VM 151 is not running")


async def test_a_node_that_is_down_answers_595(
    fake: FakeProxmox, http: aiohttp.ClientSession
) -> None:
    fake.set_node_online("pve2", False)
    status, reason, body = await call(http, "GET", "/nodes/pve2/qemu")
    assert status == 595
    assert reason.startswith("Errors during connection establishment")
    assert body is None


async def test_json_bodies_are_accepted_like_forms(
    fake: FakeProxmox, http: aiohttp.ClientSession
) -> None:
    fake.add_vm(150, "vm", running=False)
    status, _, _ = await call(
        http, "PUT", "/nodes/pve1/qemu/150/config", json={"tags": "a;b", "description": "d"}
    )
    assert status == 200
    assert fake.vms[150].config["tags"] == "a;b"
    status, _, body = await call(
        http, "PUT", "/nodes/pve1/qemu/150/config", data={"tags": "ok;Not Valid!"}
    )
    assert status == 400
    assert "tags" in body["errors"]


@pytest.mark.parametrize("spelling", ["true", "false", "yes", "on", "True", ""])
async def test_booleans_are_only_0_or_1(http: aiohttp.ClientSession, spelling: str) -> None:
    status, _, body = await call(
        http, "POST", "/nodes/pve1/qemu/9000/clone", data={"newid": "150", "full": spelling}
    )
    assert status == 400
    assert body["errors"] == {"full": f"type check ('boolean') failed - got '{spelling}'\n"}


async def test_a_clone_to_another_node_stays_on_the_source_until_its_task_ends(
    fake: FakeProxmox, http: aiohttp.ClientSession
) -> None:
    fake.timings = FakeTimings(clone_seconds=0.1)
    _, _, body = await call(
        http,
        "POST",
        "/nodes/pve1/qemu/9000/clone",
        data={"newid": "150", "target": "pve2", "name": "far", "full": "0"},
    )
    assert body["data"].startswith("UPID:pve1:")
    task = await fake.started_tasks.get()
    status, _, config = await call(http, "GET", "/nodes/pve1/qemu/150/config")
    assert (status, config["data"]["lock"]) == (200, "clone")
    status, reason, _ = await call(http, "GET", "/nodes/pve2/qemu/150/config")
    assert (status, reason) == (
        500,
        "Configuration file 'nodes/pve2/qemu-server/150.conf' does not exist",
    )
    assert task.runner is not None
    await task.runner
    status, _, _ = await call(http, "GET", "/nodes/pve1/qemu/150/config")
    assert status == 500
    status, _, config = await call(http, "GET", "/nodes/pve2/qemu/150/config")
    assert (status, config["data"]["name"]) == (200, "far")
    assert "lock" not in config["data"]


@pytest.mark.parametrize(
    ("version", "needed", "absent"),
    [
        ("9.0.10", "VM.GuestAgent.Audit", "VM.Monitor"),
        ("8.2.4", "VM.Monitor", "VM.GuestAgent.Audit"),
    ],
)
async def test_the_privileges_checked_follow_the_version(
    version: str, needed: str, absent: str
) -> None:
    assert needed in privileges_for(version)
    assert absent not in privileges_for(version)
    async with (
        FakeProxmox(version=version) as fake,
        aiohttp.ClientSession(base_url=fake.endpoint) as http,
    ):
        fake.add_vm(150, "vm", running=True)
        _, _, reported = await call(http, "GET", "/version")
        assert reported["data"]["version"] == version
        _, _, ping = await call(http, "POST", "/nodes/pve1/qemu/150/agent/ping")
        assert ping == {"data": {"result": {}}}
        fake.tokens[TOKEN_ID].privileges = privileges_for(version) - {needed}
        status, reason, _ = await call(http, "POST", "/nodes/pve1/qemu/150/agent/ping")
        assert (status, reason) == (403, f"Permission check failed (/vms/150, {needed})")
