"""The Proxmox VE driver against the API fake: wire format, faults, ownership, TLS, secrets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from deskpool.drivers import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterConnection,
    DesktopProtocol,
    DriverContext,
    DriverError,
    InMemorySharedState,
    NodeUnavailable,
    NotOwned,
    OperationFailed,
    PermissionDenied,
    PowerState,
    TlsVerificationFailed,
    deadline_after,
)
from deskpool.testing.certificates import self_signed
from deskpool.testing.conformance import eventually
from deskpool_driver_proxmox import ProxmoxDriver
from deskpool_driver_proxmox.testing import (
    ALL_PRIVILEGES,
    DEFAULT_VERSION,
    TOKEN_ID,
    TOKEN_SECRET,
    FakeProxmox,
    FakeTimings,
    RecordedRequest,
)

LINUX_TEMPLATE = "9000"
WINDOWS_TEMPLATE = "9001"


def make_driver(
    fake: FakeProxmox, *, secret: str = TOKEN_SECRET, **connection: Any
) -> ProxmoxDriver:
    return ProxmoxDriver(
        ClusterConnection(
            connection.pop("endpoint", fake.endpoint),
            {"token_id": TOKEN_ID, "token_secret": secret},
            options={"task_poll_interval": 0.005},
            **connection,
        ),
        DriverContext(InMemorySharedState(), cluster_id="pve-test"),
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeProxmox]:
    async with FakeProxmox() as running:
        yield running


@pytest.fixture
async def driver(fake: FakeProxmox) -> AsyncIterator[ProxmoxDriver]:
    opened = make_driver(fake)
    yield opened
    await opened.close()


def requests_to(fake: FakeProxmox, method: str, suffix: str) -> list[dict[str, str]]:
    return [r.params for r in fake.requests if r.method == method and r.path.endswith(suffix)]


# ---------------------------------------------------------------------------- wire format


async def test_a_linked_clone_to_another_node_speaks_the_api(
    fake: FakeProxmox, driver: ProxmoxDriver
) -> None:
    vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1", node="pve2")
    assert (vm.node, vm.power_state) == ("pve2", PowerState.STOPPED)
    clone = next(r for r in fake.requests if r.path.endswith("/clone"))
    assert clone.method == "POST"
    assert clone.path == f"/nodes/pve1/qemu/{LINUX_TEMPLATE}/clone"
    assert clone.content_type == "application/x-www-form-urlencoded"
    assert clone.params == {
        "newid": vm.id,
        "name": "desk-1",
        "full": "0",
        "target": "pve2",
        "description": "deskpool desktop d1",
    }
    assert requests_to(fake, "PUT", f"/qemu/{vm.id}/config") == [
        {"tags": "deskpool;deskpool-desktop-d1;ubuntu"}
    ]
    assert fake.vms[int(vm.id)].config["tags"] == "deskpool;deskpool-desktop-d1;ubuntu"
    assert any("/tasks/UPID:pve1:" in r.path and r.path.endswith("/status") for r in fake.requests)


async def test_a_full_clone_names_its_storage(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    vm = await driver.clone(
        LINUX_TEMPLATE, name="desk-1", desktop_id="d1", linked=False, storage="local-lvm"
    )
    params = requests_to(fake, "POST", "/clone")[0]
    assert (params["full"], params["storage"]) == ("1", "local-lvm")
    assert "target" not in params
    assert fake.vms[int(vm.id)].config["scsi0"].startswith(f"local-lvm:vm-{vm.id}-disk-0")


async def test_power_calls_send_their_parameters(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")
    await driver.start(vm.id)
    await driver.shutdown(vm.id, guest_timeout=12.5, desktop_id="d1")
    assert requests_to(fake, "POST", "/status/shutdown") == [{"timeout": "13", "forceStop": "1"}]
    await driver.start(vm.id)
    await driver.delete(vm.id, desktop_id="d1")
    assert requests_to(fake, "POST", "/status/stop")  # a running VM is stopped first
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert deletes[0].path == f"/nodes/pve1/qemu/{vm.id}"
    assert deletes[0].params["purge"] == "1"
    assert deletes[0].params["destroy-unreferenced-disks"] == "1"
    assert int(vm.id) not in fake.vms


# ---------------------------------------------------------------------------- faults


async def test_a_node_that_is_down(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1", node="pve2")
    fake.set_node_online("pve2", False)
    with pytest.raises(NodeUnavailable) as raised:
        await driver.power_state(vm.id)
    assert raised.value.retryable
    with pytest.raises(NodeUnavailable):
        await driver.delete(vm.id)
    assert [n.online for n in await driver.list_nodes()] == [True, False]
    assert [v.power_state for v in await driver.list_owned_vms()] == [PowerState.UNKNOWN]
    fake.set_node_online("pve2", True)
    assert await driver.power_state(vm.id) is PowerState.STOPPED


async def test_a_silent_agent(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    vm = await driver.clone(WINDOWS_TEMPLATE, name="win-1", desktop_id="d1")
    fake.silence_agent(int(vm.id))
    await driver.start(vm.id)
    assert not await driver.agent_ping(vm.id)
    assert not await driver.windows_ready(vm.id)
    with pytest.raises(AgentNotRunning):
        await driver.guest_info(vm.id)
    with pytest.raises(AgentNotRunning):
        await driver.desktop_endpoint(vm.id, "rdp")


async def test_windows_stuck_in_oobe_is_not_ready(fake: FakeProxmox) -> None:
    fake.timings = FakeTimings(agent_seconds=0, oobe_seconds=0)
    driver = make_driver(fake)
    try:
        vm = await driver.clone(WINDOWS_TEMPLATE, name="win-1", desktop_id="d1")
        fake.stall_oobe(int(vm.id))
        await driver.start(vm.id)
        assert await driver.agent_ping(vm.id)
        assert not await driver.windows_ready(vm.id)
        reads = requests_to(fake, "GET", "/agent/file-read")
        assert reads[-1]["file"] == r"C:\Windows\Setup\State\State.ini"
        fake.stall_oobe(int(vm.id), False)
        assert await driver.windows_ready(vm.id)
        info = await driver.guest_info(vm.id)
        assert info.os_name == "Windows 11 Pro"
        assert info.addresses[0].startswith("10.20.")
    finally:
        await driver.close()


async def test_a_failed_clone_task(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    fake.fail_next_clone("clone failed: no space left on device")
    with pytest.raises(OperationFailed, match="no space left"):
        await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")
    assert await driver.list_owned_vms() == []
    assert [vm.vmid for vm in fake.vms.values() if not vm.is_template] == []


async def test_a_clone_retries_when_its_id_is_taken(
    fake: FakeProxmox, driver: ProxmoxDriver
) -> None:
    fake.steal_next_id(2)
    vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")
    assert vm.id == "102"
    assert fake.vms[100].config["name"] == "raced-100"
    assert fake.vms[100].config["tags"] == ""
    assert len(requests_to(fake, "POST", "/clone")) == 3


async def test_a_token_lacking_a_privilege(fake: FakeProxmox, driver: ProxmoxDriver) -> None:
    fake.tokens[TOKEN_ID].privileges = ALL_PRIVILEGES - {"VM.Clone"}
    with pytest.raises(PermissionDenied, match=r"VM\.Clone"):
        await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")


async def test_parameter_errors_name_the_parameter(driver: ProxmoxDriver) -> None:
    with pytest.raises(DriverError, match="name: invalid format"):
        await driver.clone(LINUX_TEMPLATE, name="not_a_dns_name!", desktop_id="d1")


async def test_desktops_are_rdp_for_windows_and_the_pools_choice_for_linux(
    fake: FakeProxmox, driver: ProxmoxDriver
) -> None:
    windows = await driver.clone(WINDOWS_TEMPLATE, name="win-1", desktop_id="d1")
    linux = await driver.clone(LINUX_TEMPLATE, name="lin-1", desktop_id="d2")
    for vm in (windows, linux):
        await driver.start(vm.id)
        await eventually(lambda vm=vm: driver.agent_ping(vm.id), within=5, what="agent")
    low, high = int(windows.id) % 256, int(windows.id) // 256 % 256
    for preference in (None, "rdp", "vnc"):
        endpoint = await driver.desktop_endpoint(windows.id, preference)
        assert (endpoint.protocol, endpoint.host, endpoint.port) == (
            DesktopProtocol.RDP,
            f"10.20.{high}.{low}",  # the agent's first IPv4 address
            3389,
        )
        assert endpoint.parameters == {"security": "any", "ignore-cert": "true"}
        assert endpoint.credentials == {}
    fake.lack_osinfo(int(windows.id))  # an old agent: the VM's ostype (win11) says Windows
    assert (await driver.desktop_endpoint(windows.id, "vnc")).protocol is DesktopProtocol.RDP
    vnc = await driver.desktop_endpoint(linux.id, "vnc")
    assert (vnc.protocol, vnc.port, dict(vnc.parameters)) == (DesktopProtocol.VNC, 5900, {})
    assert (await driver.desktop_endpoint(linux.id)).protocol is DesktopProtocol.RDP
    agent_calls = [r.path for r in fake.requests if "/agent/" in r.path]
    assert f"/nodes/pve1/qemu/{linux.id}/agent/network-get-interfaces" in agent_calls


# ---------------------------------------------------------------------------- ownership


@pytest.mark.parametrize("node", ["pve1", "pve2"])
async def test_a_reused_id_is_not_touched(
    fake: FakeProxmox, driver: ProxmoxDriver, node: str
) -> None:
    vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")
    # Someone deletes it behind deskpool's back and makes a VM of their own with the same id,
    # possibly on another node than the one the driver remembers.
    del fake.vms[int(vm.id)]
    fake.add_vm(int(vm.id), "payroll-db", node=node, tags="prod")
    for operation in ("delete", "stop", "shutdown", "reset"):
        with pytest.raises(NotOwned):
            await getattr(driver, operation)(vm.id, desktop_id="d1")
    survivor = fake.vms[int(vm.id)]
    assert (survivor.config["name"], survivor.running) == ("payroll-db", True)


async def test_a_cancelled_clone_is_still_tagged(fake: FakeProxmox) -> None:
    fake.timings = FakeTimings(clone_seconds=0.2)
    driver = make_driver(fake)
    clone = asyncio.create_task(driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1"))
    task = await fake.started_tasks.get()
    assert task.type == "qmclone"
    clone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await clone
    assert task.exitstatus is None  # the clone goes on on the cluster
    await driver.close()  # waits for the background watcher
    assert task.exitstatus == "OK"
    (made,) = [vm for vm in fake.vms.values() if not vm.is_template]
    assert made.config["tags"] == "deskpool;deskpool-desktop-d1;ubuntu"


async def test_a_deadline_during_a_clone_still_tags_it(fake: FakeProxmox) -> None:
    fake.timings = FakeTimings(clone_seconds=0.2)
    driver = make_driver(fake)
    with pytest.raises(DriverError, match="deadline"):
        await driver.clone(
            LINUX_TEMPLATE,
            name="desk-1",
            desktop_id="d1",
            deadline=deadline_after(0.05),
        )
    await driver.close()
    (made,) = [vm for vm in fake.vms.values() if not vm.is_template]
    assert "deskpool-desktop-d1" in made.config["tags"]


def is_task_poll(request: RecordedRequest) -> bool:
    return "/tasks/UPID:" in request.path and request.path.endswith("/status")


@pytest.mark.parametrize("cancelled", ["before_the_task_id", "while_polling_the_task"])
async def test_a_long_cross_node_clone_ends_tagged_and_owned(
    fake: FakeProxmox, cancelled: str
) -> None:
    # The clone outlives many polls of the tagger (every 5 ms for 0.4 s), during which its
    # configuration is on the source node only: the watcher follows the task (or, without its
    # id, both nodes), not the target alone.
    fake.timings = FakeTimings(clone_seconds=0.4)
    driver = make_driver(fake)
    clone = asyncio.create_task(
        driver.clone(LINUX_TEMPLATE, name="desk-far", desktop_id="d7", node="pve2")
    )
    task = await fake.started_tasks.get()
    if cancelled == "while_polling_the_task":
        await fake.request_seen(is_task_poll)
    clone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await clone
    (made,) = [vm for vm in fake.vms.values() if not vm.is_template]
    assert (made.node, made.config.get("lock")) == ("pve1", "clone")
    await driver.close()  # waits for the background watcher
    assert task.exitstatus == "OK"
    assert made.node == "pve2"
    assert made.config["tags"] == "deskpool;deskpool-desktop-d7;ubuntu"
    if cancelled == "while_polling_the_task":
        watched = [r for r in fake.requests if is_task_poll(r)]
    else:
        watched = [r for r in fake.requests if r.path == f"/nodes/pve1/qemu/{made.vmid}/config"]
    assert len(watched) > 10  # more polls than the old watcher made before giving up
    async with make_driver(fake) as fresh:
        owned = await fresh.list_owned_vms()
    assert [(vm.id, vm.node, vm.desktop_id) for vm in owned] == [(str(made.vmid), "pve2", "d7")]


async def test_a_clone_whose_task_cannot_be_followed_is_tagged_later(fake: FakeProxmox) -> None:
    # The source node stops answering while its clone task runs: the call fails (the
    # caller retries later), and the clone, which goes on, is still tagged once it ends.
    fake.timings = FakeTimings(clone_seconds=0.3)
    driver = make_driver(fake)
    clone = asyncio.create_task(
        driver.clone(LINUX_TEMPLATE, name="desk-far", desktop_id="d8", node="pve2")
    )
    task = await fake.started_tasks.get()
    await fake.request_seen(is_task_poll)
    fake.set_node_online("pve1", False)
    with pytest.raises(NodeUnavailable):
        await clone
    assert task.exitstatus is None
    fake.set_node_online("pve1", True)
    await driver.close()
    (made,) = [vm for vm in fake.vms.values() if not vm.is_template]
    assert (made.node, made.config["tags"]) == ("pve2", "deskpool;deskpool-desktop-d8;ubuntu")


async def test_a_cancelled_clone_whose_task_fails_leaves_nothing(fake: FakeProxmox) -> None:
    fake.timings = FakeTimings(clone_seconds=0.1)
    fake.fail_next_clone()
    driver = make_driver(fake)
    clone = asyncio.create_task(
        driver.clone(LINUX_TEMPLATE, name="desk-far", desktop_id="d7", node="pve2")
    )
    task = await fake.started_tasks.get()
    await fake.request_seen(is_task_poll)
    clone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await clone
    await asyncio.wait_for(driver.close(), 5)
    assert str(task.exitstatus).startswith("clone failed")
    assert [vm for vm in fake.vms.values() if not vm.is_template] == []
    assert not [r for r in fake.requests if r.method == "PUT"]


# ---------------------------------------------------------------------------- secrets


async def test_the_token_secret_never_reaches_logs_or_errors(
    fake: FakeProxmox, leak_guard: Any
) -> None:
    secret = leak_guard.plaintext("proxmox-token")
    fake.tokens[TOKEN_ID].secret = secret
    driver = make_driver(fake, secret=secret)
    wrong = make_driver(fake, secret=leak_guard.plaintext("wrong-token"))
    try:
        with leak_guard.watching("proxmox driver"):
            assert (await driver.check_connection()).version == DEFAULT_VERSION
            vm = await driver.clone(LINUX_TEMPLATE, name="desk-1", desktop_id="d1")
            await driver.delete(vm.id)
            with pytest.raises(AuthenticationFailed) as raised:
                await wrong.check_connection()
        shown = f"{raised.value!r} {raised.value.detail} {driver.connection!r} {driver.client!r}"
        assert leak_guard.found_in(shown) == []
    finally:
        await driver.close()
        await wrong.close()


# ---------------------------------------------------------------------------- TLS


class ServerCertificate:
    """The fake Proxmox VE server's certificate (for 127.0.0.1) and its TLS context."""

    def __init__(self, directory: Path) -> None:
        certificate = self_signed("pve1.test", ip="127.0.0.1")
        self.pem = certificate.pem
        self.fingerprint = certificate.fingerprint
        self.context = certificate.server_context(directory)


@pytest.fixture
def server_certificate(tmp_path: Path) -> ServerCertificate:
    return ServerCertificate(tmp_path)


@pytest.fixture
async def tls_fake(server_certificate: ServerCertificate) -> AsyncIterator[FakeProxmox]:
    async with FakeProxmox(ssl_context=server_certificate.context) as running:
        assert running.endpoint.startswith("https://127.0.0.1:")
        yield running


@pytest.mark.parametrize(
    ("settings", "accepted"),
    [
        ({}, False),
        ({"ca_cert": "pem"}, True),
        ({"fingerprint": "pin"}, True),
        ({"fingerprint": ":".join(["00"] * 32)}, False),
        ({"tls_verify": False}, True),
    ],
    ids=["system-cas", "ca-cert", "fingerprint", "wrong-fingerprint", "unverified"],
)
async def test_tls_settings(
    tls_fake: FakeProxmox,
    server_certificate: ServerCertificate,
    settings: dict[str, Any],
    accepted: bool,
) -> None:
    if settings.get("ca_cert") == "pem":
        settings["ca_cert"] = server_certificate.pem
    if settings.get("fingerprint") == "pin":
        settings["fingerprint"] = server_certificate.fingerprint
    driver = make_driver(tls_fake, **settings)
    try:
        if accepted:
            assert (await driver.check_connection()).product == "Proxmox VE"
        else:
            with pytest.raises(TlsVerificationFailed):
                await driver.check_connection()
    finally:
        await driver.close()
