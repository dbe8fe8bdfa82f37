"""The simulator: option parsing, phase rules at chosen instants, and the driver in memory."""

from __future__ import annotations

import pytest

from deskpool.drivers import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterConnection,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverConfigurationError,
    DriverContext,
    HypervisorDriver,
    InMemorySharedState,
    NodeUnavailable,
    NotFound,
    NotOwned,
    OperationFailed,
    OsType,
    PowerState,
    VmNotRunning,
)
from deskpool.registry import Registry
from deskpool_driver_simulator import (
    Faults,
    SimulatorDriver,
    SimulatorSettings,
    deskpool_register_hypervisor_drivers,
)
from deskpool_driver_simulator.cluster import SimulatedCluster
from deskpool_driver_simulator.settings import DesktopSpec, TemplateSpec, Timings

# ---------------------------------------------------------------------------- settings


def test_default_settings() -> None:
    settings = SimulatorSettings.from_options({})
    assert settings.nodes == ("sim-node-1", "sim-node-2")
    assert [(t.name, t.os_type) for t in settings.templates] == [
        ("ubuntu-22.04", OsType.LINUX),
        ("windows-11", OsType.WINDOWS),
        ("ubuntu-24.04", OsType.LINUX),  # a second Linux template: a rollout is tried at once
    ]
    assert settings.timings.clone_seconds == 0.01


def test_options_configure_everything() -> None:
    settings = SimulatorSettings.from_options(
        {
            "nodes": ["a", "b"],
            "templates": [{"name": "w", "os": "windows", "node": "b"}],
            "clone_seconds": 2,
            "agent_never_answers": "stuck-*",
            "offline_nodes": ["b"],
            "desktop": {"protocol": "rdp", "host": "10.1.2.3", "password": "pw"},
            "required_token": "t",
        }
    )
    assert settings.templates == (TemplateSpec("9000", "w", "b", OsType.WINDOWS),)
    assert settings.timings.clone_seconds == 2.0
    assert settings.faults.agent_never_answers == frozenset({"stuck-*"})
    assert settings.faults.offline_nodes == frozenset({"b"})
    assert settings.desktop == DesktopSpec(DesktopProtocol.RDP, "10.1.2.3", password="pw")
    assert settings.desktop.port_or_default == 3389
    assert "pw" not in repr(settings.desktop)
    assert settings.required_token == "t"


def test_every_bad_option_is_reported_at_once() -> None:
    with pytest.raises(DriverConfigurationError) as raised:
        SimulatorSettings.from_options(
            {
                "colne_seconds": 1,
                "boot_seconds": -1,
                "clone_failure_rate": 2,
                "offline_nodes": ["nowhere"],
                "desktop": {"protocol": "rdp", "port": 0, "colour": "blue"},
                "templates": [{"name": "x", "os": "beos"}],
            }
        )
    message = raised.value.detail
    for fragment in (
        "colne_seconds",
        "boot_seconds",
        "clone_failure_rate",
        "nowhere",
        "port",
        "templates[0].os",
    ):
        assert fragment in message


# ---------------------------------------------------------------------------- phase rules

SETTINGS = SimulatorSettings.from_options(
    {
        "clone_seconds": 10,
        "boot_seconds": 20,
        "agent_seconds": 5,
        "oobe_seconds": 100,
        "shutdown_seconds": 3,
    }
)
WINDOWS = SETTINGS.templates[1]


def _cloned(cluster: SimulatedCluster, *, name: str = "w-1", fails: bool = False) -> str:
    vm = cluster.begin_clone(
        template=WINDOWS,
        name=name,
        node=WINDOWS.node,
        tags=("deskpool", "deskpool-desktop-d1"),
        description="",
        fails=fails,
        settings=SETTINGS,
        now=1000.0,
    )
    return vm.id


def test_a_clone_is_busy_until_its_copy_is_done() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster)
    vm = cluster.vms[vm_id]
    assert cluster.view(vm, SETTINGS, 1009.9).busy
    assert not cluster.view(vm, SETTINGS, 1010.0).busy
    with pytest.raises(DriverBusy):
        cluster.power_on(vm_id, SETTINGS, 1005.0)


def test_a_failed_clone_vanishes_when_its_copy_would_finish() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster, fails=True)
    cluster.settle(SETTINGS, 1009.0)
    assert vm_id in cluster.vms
    cluster.settle(SETTINGS, 1010.0)
    assert vm_id not in cluster.vms


def test_boot_agent_and_oobe_follow_power_on() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster)
    cluster.power_on(vm_id, SETTINGS, 2000.0)
    vm = cluster.vms[vm_id]
    assert cluster.power_state(vm, SETTINGS, 2000.0) is PowerState.RUNNING
    assert not cluster.agent_answers(vm, SETTINGS, 2024.9)
    assert cluster.agent_answers(vm, SETTINGS, 2025.0)
    assert not cluster.windows_ready(vm, SETTINGS, 2124.9)
    assert cluster.windows_ready(vm, SETTINGS, 2125.0)
    cluster.reset(vm_id, SETTINGS, 2200.0)
    assert not cluster.agent_answers(vm, SETTINGS, 2210.0)


def test_faults_silence_agents_stall_oobe_and_take_nodes_down() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster, name="stuck-1")
    cluster.power_on(vm_id, SETTINGS, 2000.0)
    vm = cluster.vms[vm_id]
    cluster.faults = Faults(oobe_never_finishes=frozenset({"stuck-*"}))
    assert cluster.agent_answers(vm, SETTINGS, 9000.0)
    assert not cluster.windows_ready(vm, SETTINGS, 9000.0)
    cluster.faults = Faults(agent_never_answers=frozenset({vm_id}))
    assert not cluster.agent_answers(vm, SETTINGS, 9000.0)
    cluster.faults = Faults(offline_nodes=frozenset({vm.node}))
    assert cluster.power_state(vm, SETTINGS, 9000.0) is PowerState.UNKNOWN
    with pytest.raises(NodeUnavailable):
        cluster.vm(vm_id, SETTINGS, 9000.0)


def test_a_shutdown_ends_after_shutdown_seconds_unless_ignored() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster)
    cluster.power_on(vm_id, SETTINGS, 2000.0)
    assert cluster.request_shutdown(vm_id, SETTINGS, 2100.0) == 2103.0
    vm = cluster.vms[vm_id]
    assert cluster.power_state(vm, SETTINGS, 2102.0) is PowerState.RUNNING
    assert cluster.power_state(vm, SETTINGS, 2103.0) is PowerState.STOPPED
    cluster.settle(SETTINGS, 2103.0)
    assert vm.powered_on_at is None
    cluster.power_on(vm_id, SETTINGS, 3000.0)
    cluster.faults = Faults(ignores_shutdown=frozenset({"w-*"}))
    assert cluster.request_shutdown(vm_id, SETTINGS, 3100.0) is None
    assert cluster.power_state(vm, SETTINGS, 9999.0) is PowerState.RUNNING


def test_the_document_round_trips() -> None:
    cluster = SimulatedCluster()
    vm_id = _cloned(cluster)
    cluster.power_on(vm_id, SETTINGS, 2000.0)
    cluster.faults = Faults(clone_failure_rate=0.5, clone_fails_for=frozenset({"x*"}))
    again = SimulatedCluster.from_bytes(cluster.to_bytes())
    assert again == cluster
    assert SimulatedCluster.from_bytes(b'{"version": 0}') == SimulatedCluster()


# ---------------------------------------------------------------------------- the driver


def _driver(state: InMemorySharedState | None = None, **options: object) -> SimulatorDriver:
    return SimulatorDriver(
        ClusterConnection("simulator://local", {"token": "t"}, options=options),
        DriverContext(state or InMemorySharedState(), cluster_id="sim"),
    )


def test_registers_as_simulator() -> None:
    registry: Registry[type[HypervisorDriver]] = Registry("hypervisor driver")
    deskpool_register_hypervisor_drivers(registry)
    assert registry.get("simulator") is SimulatorDriver


async def test_two_instances_share_one_cluster() -> None:
    state = InMemorySharedState()
    api, worker = _driver(state), _driver(state)
    vm = await worker.clone("9000", name="lin-1", desktop_id="d1")
    assert [v.id for v in await api.list_owned_vms()] == [vm.id]
    await api.start(vm.id)
    assert await worker.power_state(vm.id) is PowerState.RUNNING


async def test_a_required_token_is_checked() -> None:
    with pytest.raises(AuthenticationFailed):
        await _driver(required_token="other").check_connection()
    assert (await _driver(required_token="t").check_connection()).product == "deskpool simulator"


async def test_clone_failures_by_pattern_and_rate() -> None:
    driver = _driver(clone_fails_for=["doomed-*"])
    with pytest.raises(OperationFailed):
        await driver.clone("9000", name="doomed-1", desktop_id="d1")
    assert await driver.list_owned_vms() == []
    await driver.admin.inject(clone_failure_rate=1.0)
    with pytest.raises(OperationFailed):
        await driver.clone("9000", name="fine-1", desktop_id="d2")
    await driver.admin.clear_faults()
    assert (await driver.clone("9000", name="fine-2", desktop_id="d3")).desktop_id == "d3"


async def test_clone_checks_template_node_and_storage() -> None:
    driver = _driver()
    with pytest.raises(NotFound, match="template"):
        await driver.clone("1", name="x", desktop_id="d1")
    with pytest.raises(NotFound, match="node"):
        await driver.clone("9000", name="x", desktop_id="d1", node="nowhere")
    with pytest.raises(NotFound, match="storage"):
        await driver.clone("9000", name="x", desktop_id="d1", linked=False, storage="tape")
    vm = await driver.clone("9000", name="x", desktop_id="d1", node="sim-node-2", linked=False)
    assert vm.node == "sim-node-2"


async def test_admin_faults_apply_at_run_time() -> None:
    driver = _driver(agent_seconds=0, boot_seconds=0, oobe_seconds=0)
    vm = await driver.clone("9001", name="win-1", desktop_id="d1")
    await driver.start(vm.id)
    assert await driver.agent_ping(vm.id)
    assert await driver.windows_ready(vm.id)

    await driver.admin.inject(oobe_never_finishes="win-*")
    assert not await driver.windows_ready(vm.id)
    await driver.admin.inject(agent_never_answers=vm.id)
    assert not await driver.agent_ping(vm.id)
    with pytest.raises(AgentNotRunning):
        await driver.guest_info(vm.id)
    with pytest.raises(AgentNotRunning):
        await driver.desktop_endpoint(vm.id, "rdp")

    await driver.admin.set_node_online("sim-node-1", False)
    assert [n.online for n in await driver.list_nodes()] == [False, True]
    assert [v.power_state for v in await driver.list_owned_vms()] == [PowerState.UNKNOWN]
    with pytest.raises(NodeUnavailable):
        await driver.power_state(vm.id)
    with pytest.raises(NodeUnavailable):
        await driver.clone("9000", name="x", desktop_id="d2")

    await driver.admin.clear_faults()
    assert await driver.windows_ready(vm.id)
    assert await driver.admin.faults() == Faults()


async def test_a_guest_ignoring_shutdown_is_powered_off_after_its_timeout() -> None:
    driver = _driver(shutdown_seconds=0)
    vm = await driver.clone("9000", name="deaf-1", desktop_id="d1")
    await driver.start(vm.id)
    await driver.admin.inject(ignores_shutdown="deaf-*")
    await driver.shutdown(vm.id, guest_timeout=0.01)
    assert await driver.power_state(vm.id) is PowerState.STOPPED


async def test_foreign_vms_are_not_owned() -> None:
    driver = _driver()
    foreign = await driver.admin.add_foreign_vm("payroll-db")
    assert foreign.power_state is PowerState.RUNNING
    assert await driver.list_owned_vms() == []
    with pytest.raises(NotOwned):
        await driver.delete(foreign.id)
    assert (await driver.get_vm(foreign.id)).name == "payroll-db"


async def test_an_id_reused_by_someone_else_is_not_touched() -> None:
    driver = _driver()
    vm = await driver.clone("9000", name="lin-1", desktop_id="d1")
    await driver.admin.set_tags(vm.id, ("someone-else",))
    with pytest.raises(NotOwned):
        await driver.delete(vm.id, desktop_id="d1")


async def test_desktops_are_the_desktop_daemon_simulators_by_default() -> None:
    driver = _driver(agent_seconds=0, boot_seconds=0)
    vm = await driver.clone("9000", name="lin-1", desktop_id="d1")
    with pytest.raises(VmNotRunning):
        await driver.desktop_endpoint(vm.id)
    await driver.start(vm.id)
    for preference in (None, "vnc", "rdp"):
        endpoint = await driver.desktop_endpoint(vm.id, preference)
        assert endpoint == DesktopEndpoint(DesktopProtocol.VNC, "lin-1", 5900)


async def test_a_simulated_cluster_can_give_its_vms_a_real_desktop() -> None:
    real = {
        "protocol": "rdp",
        "host": "192.0.2.10",
        "port": 13389,
        "username": "demo",
        "password": "s3cret-pw",
        "parameters": {"security": "nla", "ignore-cert": "true"},
    }
    driver = _driver(agent_seconds=0, boot_seconds=0, desktop=real)
    vm = await driver.clone("9001", name="win-1", desktop_id="d1")
    await driver.start(vm.id)
    endpoint = await driver.desktop_endpoint(vm.id, "vnc")
    assert (endpoint.protocol, endpoint.host, endpoint.port) == (
        DesktopProtocol.RDP,
        "192.0.2.10",
        13389,
    )
    assert endpoint.credentials == {"username": "demo", "password": "s3cret-pw"}
    assert endpoint.parameters == {"security": "nla", "ignore-cert": "true"}
    assert "s3cret-pw" not in repr(endpoint)
    only_host = _driver(agent_seconds=0, boot_seconds=0, desktop={"host": "127.0.0.1"})
    vm = await only_host.clone("9000", name="lin-2", desktop_id="d2")
    await only_host.start(vm.id)
    assert await only_host.desktop_endpoint(vm.id) == DesktopEndpoint("vnc", "127.0.0.1", 5900)  # type: ignore[arg-type]


def test_timings_are_plain_data() -> None:
    assert Timings(clone_seconds=1).clone_seconds == 1
