"""What the base class does for every driver: deadlines, cancellation, observation, ownership."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from deskpool.drivers import (
    CloneRequest,
    ClusterConnection,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverCall,
    DriverCapabilities,
    DriverContext,
    DriverError,
    DriverTimeout,
    HypervisorDriver,
    InMemorySharedState,
    Node,
    NotOwned,
    PowerState,
    Template,
    Unsupported,
    VirtualMachine,
    VmNotFound,
    VmNotRunning,
    deadline_after,
    remaining_time,
)


class RecordingObserver:
    def __init__(self) -> None:
        self.calls: list[DriverCall] = []

    def driver_call_finished(self, call: DriverCall) -> None:
        self.calls.append(call)


class DictDriver(HypervisorDriver):
    """A driver over a dict, recording which ``do_*`` methods ran."""

    name = "dict"
    capabilities = DriverCapabilities(
        linked_clone=False, full_clone=True, desktop_protocols=(DesktopProtocol.RDP,)
    )

    def __init__(self, context: DriverContext) -> None:
        super().__init__(ClusterConnection("dict://"), context)
        self.vms: dict[str, VirtualMachine] = {}
        self.ran: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.forget_tags = False
        self.desktop_protocol = DesktopProtocol.RDP
        self.seen_remaining: float | None = None

    async def _maybe_block(self) -> None:
        self.entered.set()
        self.seen_remaining = remaining_time()
        if self.gate is not None:
            await self.gate.wait()

    async def do_check_connection(self) -> ClusterInfo:
        await self._maybe_block()
        return ClusterInfo("dict", "1")

    async def do_list_nodes(self) -> list[Node]:
        await self._maybe_block()
        return [Node("n1", online=True)]

    async def do_list_templates(self) -> list[Template]:
        return []

    async def do_list_owned_vms(self) -> list[VirtualMachine]:
        return [vm for vm in self.vms.values() if self.ownership.is_owned(vm.tags)]

    async def do_get_vm(self, vm_id: str) -> VirtualMachine:
        try:
            return self.vms[vm_id]
        except KeyError:
            raise VmNotFound(f"VM {vm_id} does not exist", vm_id=vm_id) from None

    async def do_clone(self, request: CloneRequest) -> VirtualMachine:
        self.ran.append("clone")
        await self._maybe_block()
        vm_id = str(100 + len(self.vms))
        tags = () if self.forget_tags else request.tags
        self.vms[vm_id] = VirtualMachine(vm_id, request.name, "n1", PowerState.STOPPED, tags)
        return self.vms[vm_id]

    def _set(self, vm_id: str, state: PowerState) -> None:
        self.vms[vm_id] = replace(self.vms[vm_id], power_state=state)

    async def do_start(self, vm_id: str) -> None:
        self.ran.append("start")
        self._set(vm_id, PowerState.RUNNING)

    async def do_shutdown(
        self, vm: VirtualMachine, *, graceful: bool, guest_timeout: float
    ) -> None:
        self.ran.append(f"shutdown graceful={graceful} guest_timeout={guest_timeout}")
        self._set(vm.id, PowerState.STOPPED)

    async def do_stop(self, vm: VirtualMachine) -> None:
        self.ran.append("stop")
        self._set(vm.id, PowerState.STOPPED)

    async def do_reset(self, vm: VirtualMachine) -> None:
        self.ran.append("reset")

    async def do_delete(self, vm: VirtualMachine) -> None:
        self.ran.append("delete")
        del self.vms[vm.id]

    async def do_power_state(self, vm_id: str) -> PowerState:
        return (await self.do_get_vm(vm_id)).power_state

    async def do_desktop_endpoint(
        self, vm_id: str, protocol: DesktopProtocol | None
    ) -> DesktopEndpoint:
        self.ran.append(f"desktop_endpoint {protocol}")
        return DesktopEndpoint(self.desktop_protocol, "10.0.0.1", 3389)


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def driver(observer: RecordingObserver) -> DictDriver:
    return DictDriver(DriverContext(InMemorySharedState(), cluster_id="c1", observer=observer))


async def test_clone_tags_and_fills_the_desktop_id(driver: DictDriver) -> None:
    vm = await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False)
    assert vm.tags == ("deskpool", "deskpool-desktop-d1")
    assert vm.desktop_id == "d1"
    assert (await driver.get_vm(vm.id)).desktop_id == "d1"
    assert [v.desktop_id for v in await driver.list_owned_vms()] == ["d1"]


async def test_a_clone_without_tags_is_a_driver_bug(driver: DictDriver) -> None:
    driver.forget_tags = True
    with pytest.raises(DriverError, match="without deskpool's ownership tags"):
        await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False)


async def test_capabilities_are_checked_before_the_driver_runs(driver: DictDriver) -> None:
    with pytest.raises(Unsupported, match="linked clones"):
        await driver.clone("t1", name="desk-1", desktop_id="d1", linked=True)
    with pytest.raises(Unsupported, match="node"):
        await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False, node="n2")
    with pytest.raises(Unsupported, match="guest agent"):
        await driver.agent_ping("100")
    with pytest.raises(Unsupported, match="Windows"):
        await driver.windows_ready("100")
    with pytest.raises(Unsupported, match="vnc"):
        await driver.desktop_endpoint("100", "vnc")
    with pytest.raises(Unsupported, match="unknown desktop protocol"):
        await driver.desktop_endpoint("100", "telnet")
    assert driver.ran == []


async def test_storage_is_dropped_for_linked_clones() -> None:
    class LinkedDriver(DictDriver):
        capabilities = DriverCapabilities(
            linked_clone=True, desktop_protocols=(DesktopProtocol.RDP,)
        )
        requests: list[CloneRequest] = []

        async def do_clone(self, request: CloneRequest) -> VirtualMachine:
            self.requests.append(request)
            return await super().do_clone(request)

    linked = LinkedDriver(DriverContext(InMemorySharedState()))
    await linked.clone("t1", name="desk-1", desktop_id="d1", linked=True, storage="fast")
    assert linked.requests[0].storage is None
    assert linked.requests[0].description == "deskpool desktop d1"


@pytest.mark.parametrize("operation", ["delete", "stop", "shutdown", "reset"])
async def test_destructive_calls_recheck_ownership_first(
    driver: DictDriver, operation: str
) -> None:
    driver.vms["200"] = VirtualMachine("200", "someone-else", "n1", PowerState.RUNNING, ("prod",))
    with pytest.raises(NotOwned):
        await getattr(driver, operation)("200")
    vm = await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False)
    await driver.start(vm.id)
    with pytest.raises(NotOwned):
        await getattr(driver, operation)(vm.id, desktop_id="d2")
    assert driver.ran == ["clone", "start"]
    await getattr(driver, operation)(vm.id, desktop_id="d1")
    assert len(driver.ran) == 3


async def test_destructive_calls_wait_out_busy_vms(driver: DictDriver) -> None:
    vm = await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False)
    driver.vms[vm.id] = replace(driver.vms[vm.id], busy=True)
    with pytest.raises(DriverBusy):
        await driver.delete(vm.id)
    assert "delete" not in driver.ran


async def test_stopping_a_stopped_vm_does_nothing(driver: DictDriver) -> None:
    vm = await driver.clone("t1", name="desk-1", desktop_id="d1", linked=False)
    await driver.stop(vm.id)
    await driver.shutdown(vm.id)
    assert driver.ran == ["clone"]
    with pytest.raises(VmNotRunning):
        await driver.reset(vm.id)
    await driver.start(vm.id)
    await driver.shutdown(vm.id, graceful=False, guest_timeout=7)
    assert driver.ran[-1] == "shutdown graceful=False guest_timeout=7"
    with pytest.raises(ValueError, match="guest_timeout"):
        await driver.shutdown(vm.id, guest_timeout=-1)


async def test_a_passed_deadline_raises_driver_timeout(
    driver: DictDriver, observer: RecordingObserver
) -> None:
    driver.gate = asyncio.Event()
    with pytest.raises(DriverTimeout, match="list_nodes"):
        await driver.list_nodes(deadline=time.monotonic() - 1)
    assert observer.calls[-1].outcome == "driver_timeout"


async def test_the_deadline_interrupts_a_running_call(driver: DictDriver) -> None:
    driver.gate = asyncio.Event()  # never set: the call blocks until its deadline
    with pytest.raises(DriverTimeout):
        await driver.check_connection(deadline=deadline_after(0.01))


async def test_the_deadline_is_visible_inside_the_call(driver: DictDriver) -> None:
    await driver.list_nodes(deadline=deadline_after(50))
    assert driver.seen_remaining is not None
    assert 0 < driver.seen_remaining <= 50
    await driver.list_nodes()
    assert driver.seen_remaining is not None
    assert driver.seen_remaining <= driver.default_timeout
    assert remaining_time() == float("inf")


async def test_calls_are_cancellable(driver: DictDriver, observer: RecordingObserver) -> None:
    driver.gate = asyncio.Event()
    task = asyncio.create_task(driver.clone("t1", name="desk-1", desktop_id="d1", linked=False))
    await driver.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert observer.calls[-1].operation == "clone"
    assert observer.calls[-1].outcome == "cancelled"


async def test_a_cancellation_swallowed_below_is_still_raised() -> None:
    class Swallowing(DictDriver):
        async def do_list_nodes(self) -> list[Node]:
            try:
                return await super().do_list_nodes()
            except asyncio.CancelledError:  # as Python 3.11's asyncio.wait_for may do
                return []

    driver = Swallowing(DriverContext(InMemorySharedState()))
    driver.gate = asyncio.Event()
    task = asyncio.create_task(driver.list_nodes())
    await driver.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_observer_sees_every_call(
    driver: DictDriver, observer: RecordingObserver
) -> None:
    await driver.list_nodes()
    with pytest.raises(VmNotFound):
        await driver.power_state("404")
    first, second = observer.calls
    assert (first.driver, first.cluster_id, first.operation, first.outcome) == (
        "dict",
        "c1",
        "list_nodes",
        "ok",
    )
    assert first.seconds >= 0
    assert (second.operation, second.outcome) == ("power_state", "vm_not_found")


async def test_a_failing_observer_does_not_break_calls(driver: DictDriver) -> None:
    class Broken:
        def driver_call_finished(self, call: DriverCall) -> None:
            raise RuntimeError("metrics are down")

    broken = DictDriver(DriverContext(InMemorySharedState(), observer=Broken()))
    assert await broken.list_nodes()


async def test_the_driver_is_an_async_context_manager(driver: DictDriver) -> None:
    async with driver as opened:
        assert opened is driver
    assert "dict" in repr(driver)


async def test_the_desktop_endpoint_passes_the_preference_and_checks_the_answer(
    driver: DictDriver,
) -> None:
    endpoint = await driver.desktop_endpoint("100")
    assert (endpoint.protocol, endpoint.host, endpoint.port) == (
        DesktopProtocol.RDP,
        "10.0.0.1",
        3389,
    )
    assert await driver.desktop_endpoint("100", "rdp") == endpoint
    assert driver.ran == ["desktop_endpoint None", "desktop_endpoint rdp"]
    driver.desktop_protocol = DesktopProtocol.VNC  # not declared: a driver bug
    with pytest.raises(DriverError, match="vnc desktop"):
        await driver.desktop_endpoint("100")
