"""The hypervisor driver conformance kit: one pytest suite every driver must pass.

A driver package subclasses :class:`HypervisorDriverConformance` in its tests and provides two
fixtures; pytest then runs every check against the driver::

    import pytest
    from deskpool_driver_api.conformance import ConformanceTarget, HypervisorDriverConformance

    class TestAcmeConformance(HypervisorDriverConformance):
        pass

    @pytest.fixture
    async def conformance_driver():
        driver = AcmeDriver(connection, context)
        yield ConformanceTarget(driver, template="ubuntu-22.04", windows_template="win11")
        await driver.close()

    @pytest.fixture
    async def conformance_unauthenticated_driver():
        driver = AcmeDriver(connection_with_a_wrong_secret, context)
        yield driver
        await driver.close()

The suite checks the driver's declared connection fields against its own validation
(:mod:`deskpool_driver_api.conformance_fields`), every operation of the contract, the error
types it promises (not found, not owned, not running, unsupported, authentication, timeouts),
cancellation, and the ownership rule: destructive calls refuse templates and other desktops'
VMs. Every VM it creates belongs to a fresh desktop id and is deleted at the end of its test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple

import pytest

from deskpool_driver_api import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterInfo,
    DesktopEndpoint,
    DesktopProtocol,
    DriverBusy,
    DriverCapabilities,
    DriverTimeout,
    HypervisorDriver,
    Node,
    NotFound,
    NotOwned,
    OsType,
    PowerState,
    Template,
    Unsupported,
    VirtualMachine,
    VmNotFound,
    VmNotRunning,
    deadline_after,
)
from deskpool_driver_api.conformance_fields import ConnectionFieldsConformance

__all__ = [
    "DESTRUCTIVE_OPERATIONS",
    "ConformanceTarget",
    "HypervisorDriverConformance",
    "clone_for",
    "eventually",
    "is_gone",
    "new_desktop_id",
    "remove_desktops",
    "template_named",
    "vm_name",
    "wait_for_agent",
]

#: Destructive operations: each must re-check ownership.
DESTRUCTIVE_OPERATIONS = ("delete", "stop", "shutdown", "reset")


class ConformanceTarget(NamedTuple):
    """What ``conformance_driver`` yields.

    :param driver: a driver connected to a cluster the suite may create VMs on.
    :param template: the name of a template to clone (any OS).
    :param windows_template: the name of a Windows template, to check Windows readiness.
    :param timeout: seconds any single wait of the suite may take (clone, boot, agent).
    """

    driver: HypervisorDriver
    template: str
    windows_template: str | None = None
    timeout: float = 60.0


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float, what: str, interval: float = 0.02
) -> None:
    """Poll ``check`` until it returns true; fail the test after ``within`` seconds.

    The hypervisor offers no event to wait on, so polling is the only way to watch a guest
    boot or an inventory refresh.
    """
    give_up = time.monotonic() + within
    while not await check():
        if time.monotonic() >= give_up:
            pytest.fail(f"{what}: not within {within:g}s")
        await asyncio.sleep(interval)


def new_desktop_id() -> str:
    """A fresh desktop id (a UUID, as the platform uses)."""
    return str(uuid.uuid4())


def vm_name(desktop_id: str) -> str:
    """A VM name for ``desktop_id`` that every hypervisor accepts (a DNS label)."""
    return f"conformance-{desktop_id[:8]}"


async def template_named(target: ConformanceTarget, name: str) -> Template:
    """The template called ``name``; fails the test when there is none."""
    templates = await target.driver.list_templates()
    for template in templates:
        if template.name == name:
            return template
    pytest.fail(f"no template named {name!r}; found {[t.name for t in templates]}")


async def clone_for(
    target: ConformanceTarget,
    desktop_id: str,
    *,
    template: str | None = None,
    linked: bool | None = None,
) -> VirtualMachine:
    """Clone ``template`` (the target's by default) for ``desktop_id``."""
    chosen = await template_named(target, template or target.template)
    capabilities = target.driver.capabilities
    return await target.driver.clone(
        chosen.id,
        name=vm_name(desktop_id),
        desktop_id=desktop_id,
        linked=capabilities.linked_clone if linked is None else linked,
        deadline=deadline_after(target.timeout),
    )


@contextlib.asynccontextmanager
async def cloned_vm(
    target: ConformanceTarget, *, template: str | None = None
) -> AsyncIterator[tuple[VirtualMachine, str]]:
    """``(vm, desktop_id)``: a VM cloned for a new desktop id, removed again on exit."""
    desktop_id = new_desktop_id()
    try:
        yield await clone_for(target, desktop_id, template=template), desktop_id
    finally:
        await remove_desktops(target, desktop_id)


async def remove_desktops(target: ConformanceTarget, *desktop_ids: str) -> None:
    """Delete every owned VM of ``desktop_ids`` (waiting out busy ones), for cleanup."""
    driver = target.driver
    wanted = set(desktop_ids)
    give_up = time.monotonic() + target.timeout
    while True:
        left = [vm for vm in await driver.list_owned_vms() if vm.desktop_id in wanted]
        if not left:
            return
        for vm in left:
            # gone already, or still cloning: the next round sees it again
            with contextlib.suppress(VmNotFound, DriverBusy):
                await driver.delete(vm.id, desktop_id=vm.desktop_id)
        if time.monotonic() >= give_up:
            pytest.fail(f"could not clean up VMs {[vm.id for vm in left]}")
        await asyncio.sleep(0.05)


async def wait_for_agent(target: ConformanceTarget, vm_id: str) -> None:
    """Wait until the guest agent of ``vm_id`` answers."""

    async def answers() -> bool:
        return await target.driver.agent_ping(vm_id)

    await eventually(answers, within=target.timeout, what=f"the agent of VM {vm_id} answers")


async def is_gone(driver: HypervisorDriver, vm_id: str) -> bool:
    """Whether ``vm_id`` no longer exists."""
    try:
        await driver.get_vm(vm_id)
    except VmNotFound:
        return True
    return False


class HypervisorDriverConformance(ConnectionFieldsConformance):
    """The conformance suite; subclass it as ``Test<Driver>Conformance`` in a driver's tests.

    Needs the fixtures ``conformance_driver`` (a :class:`ConformanceTarget`) and
    ``conformance_unauthenticated_driver`` (a driver whose credentials the cluster rejects).
    """

    # ------------------------------------------------------------------ declaration, connection

    async def test_declares_a_name_and_capabilities(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        assert isinstance(driver, HypervisorDriver)
        assert driver.name
        capabilities = driver.capabilities
        assert isinstance(capabilities, DriverCapabilities)
        assert capabilities.linked_clone or capabilities.full_clone
        assert capabilities.desktop_protocols
        assert all(isinstance(p, DesktopProtocol) for p in capabilities.desktop_protocols)

    async def test_check_connection_describes_the_cluster(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        info = await conformance_driver.driver.check_connection()
        assert isinstance(info, ClusterInfo)
        assert info.product
        assert info.version

    async def test_rejected_credentials_raise_authentication_failed(
        self, conformance_unauthenticated_driver: HypervisorDriver
    ) -> None:
        with pytest.raises(AuthenticationFailed):
            await conformance_unauthenticated_driver.check_connection()
        with pytest.raises(AuthenticationFailed):
            await conformance_unauthenticated_driver.list_owned_vms()

    async def test_lists_nodes(self, conformance_driver: ConformanceTarget) -> None:
        nodes = await conformance_driver.driver.list_nodes()
        assert nodes
        assert all(isinstance(node, Node) for node in nodes)
        assert len({node.name for node in nodes}) == len(nodes)
        assert any(node.online for node in nodes)

    async def test_lists_templates_with_their_os(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        templates = await conformance_driver.driver.list_templates()
        assert all(isinstance(t, Template) and isinstance(t.os_type, OsType) for t in templates)
        assert len({t.id for t in templates}) == len(templates)
        await template_named(conformance_driver, conformance_driver.template)
        if conformance_driver.windows_template:
            windows = await template_named(conformance_driver, conformance_driver.windows_template)
            assert windows.os_type is OsType.WINDOWS

    async def test_templates_are_never_owned(self, conformance_driver: ConformanceTarget) -> None:
        driver = conformance_driver.driver
        template = await template_named(conformance_driver, conformance_driver.template)
        assert template.id not in {vm.id for vm in await driver.list_owned_vms()}
        vm = await driver.get_vm(template.id)
        assert vm.template
        assert vm.desktop_id is None

    # ------------------------------------------------------------------ clone and delete

    @pytest.mark.parametrize("linked", [True, False], ids=["linked", "full"])
    async def test_clone_makes_a_stopped_owned_vm_and_delete_removes_it(
        self, conformance_driver: ConformanceTarget, linked: bool
    ) -> None:
        driver = conformance_driver.driver
        capable = driver.capabilities.linked_clone if linked else driver.capabilities.full_clone
        desktop_id = new_desktop_id()
        try:
            if not capable:
                with pytest.raises(Unsupported):
                    await clone_for(conformance_driver, desktop_id, linked=linked)
                return
            vm = await clone_for(conformance_driver, desktop_id, linked=linked)
            assert isinstance(vm, VirtualMachine)
            assert vm.name == vm_name(desktop_id)
            assert driver.ownership.owner_tag in vm.tags
            assert vm.desktop_id == desktop_id
            assert vm.power_state is PowerState.STOPPED
            assert not vm.template
            assert not vm.busy
            again = await driver.get_vm(vm.id)
            assert again.tags == vm.tags
            assert again.desktop_id == desktop_id
            assert await driver.power_state(vm.id) is PowerState.STOPPED

            async def listed() -> bool:
                return any(v.id == vm.id for v in await driver.list_owned_vms())

            await eventually(listed, within=conformance_driver.timeout, what="clone listed")
            owned = next(v for v in await driver.list_owned_vms() if v.id == vm.id)
            assert owned.desktop_id == desktop_id

            await driver.delete(vm.id, desktop_id=desktop_id)
            assert await is_gone(driver, vm.id)
            with pytest.raises(VmNotFound):
                await driver.power_state(vm.id)

            async def unlisted() -> bool:
                return all(v.id != vm.id for v in await driver.list_owned_vms())

            await eventually(unlisted, within=conformance_driver.timeout, what="clone unlisted")
        finally:
            await remove_desktops(conformance_driver, desktop_id)

    async def test_clone_of_an_unknown_template_raises_not_found(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        desktop_id = new_desktop_id()
        try:
            with pytest.raises(NotFound):
                await driver.clone(
                    "999999999",
                    name=vm_name(desktop_id),
                    desktop_id=desktop_id,
                    linked=driver.capabilities.linked_clone,
                )
        finally:
            await remove_desktops(conformance_driver, desktop_id)

    async def test_clone_validates_its_arguments(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        template = await template_named(conformance_driver, conformance_driver.template)
        with pytest.raises(ValueError, match="desktop id"):
            await driver.clone(template.id, name="conformance-x", desktop_id="Not A Tag!")
        with pytest.raises(ValueError, match="name"):
            await driver.clone(template.id, name="", desktop_id=new_desktop_id())

    async def test_concurrent_clones_get_distinct_vms(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        desktop_ids = [new_desktop_id() for _ in range(3)]
        try:
            vms = await asyncio.gather(*(clone_for(conformance_driver, d) for d in desktop_ids))
            assert len({vm.id for vm in vms}) == 3
            assert [vm.desktop_id for vm in vms] == desktop_ids
        finally:
            await remove_desktops(conformance_driver, *desktop_ids)

    # ------------------------------------------------------------------ power and guest

    async def test_power_lifecycle_and_guest(self, conformance_driver: ConformanceTarget) -> None:
        driver = conformance_driver.driver
        async with cloned_vm(conformance_driver) as (vm, desktop_id):
            await driver.start(vm.id)
            assert await driver.power_state(vm.id) is PowerState.RUNNING
            await driver.start(vm.id)  # idempotent
            assert await driver.power_state(vm.id) is PowerState.RUNNING

            if driver.capabilities.guest_agent:
                await wait_for_agent(conformance_driver, vm.id)
                info = await driver.guest_info(vm.id)
                assert info.addresses
                assert isinstance(info.os_type, OsType)
            await self.check_desktop_endpoints(conformance_driver, vm.id)

            await driver.reset(vm.id, desktop_id=desktop_id)
            assert await driver.power_state(vm.id) is PowerState.RUNNING

            await driver.shutdown(vm.id, graceful=True, guest_timeout=5.0, desktop_id=desktop_id)
            assert await driver.power_state(vm.id) is PowerState.STOPPED
            await driver.shutdown(vm.id, desktop_id=desktop_id)  # idempotent
            await driver.stop(vm.id, desktop_id=desktop_id)  # idempotent
            assert await driver.power_state(vm.id) is PowerState.STOPPED

            await driver.start(vm.id)
            await driver.shutdown(vm.id, graceful=False, desktop_id=desktop_id)
            assert await driver.power_state(vm.id) is PowerState.STOPPED

            await driver.start(vm.id)
            await driver.stop(vm.id, desktop_id=desktop_id)
            assert await driver.power_state(vm.id) is PowerState.STOPPED

    async def test_delete_powers_off_a_running_vm(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        async with cloned_vm(conformance_driver) as (vm, desktop_id):
            await driver.start(vm.id)
            await driver.delete(vm.id, desktop_id=desktop_id)
            assert await is_gone(driver, vm.id)

    async def test_calls_needing_a_running_vm_raise_vm_not_running(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        async with cloned_vm(conformance_driver) as (vm, _):
            with pytest.raises(VmNotRunning):
                await driver.reset(vm.id)
            if driver.capabilities.guest_agent:
                with pytest.raises(VmNotRunning):
                    await driver.agent_ping(vm.id)
            if driver.capabilities.windows_readiness:
                with pytest.raises(VmNotRunning):
                    await driver.windows_ready(vm.id)
            with pytest.raises(VmNotRunning):
                await driver.desktop_endpoint(vm.id)
            with pytest.raises(VmNotRunning):
                await driver.desktop_endpoint(vm.id, driver.capabilities.desktop_protocols[-1])

    async def test_windows_readiness(self, conformance_driver: ConformanceTarget) -> None:
        driver = conformance_driver.driver
        if not driver.capabilities.windows_readiness:
            with pytest.raises(Unsupported):
                await driver.windows_ready("0")
            return
        template = conformance_driver.windows_template or conformance_driver.template
        async with cloned_vm(conformance_driver, template=template) as (vm, _):
            await driver.start(vm.id)

            async def ready() -> bool:
                return await driver.windows_ready(vm.id)

            await eventually(ready, within=conformance_driver.timeout, what="Windows ready")
            if conformance_driver.windows_template and driver.capabilities.guest_agent:
                info = await driver.guest_info(vm.id)
                assert info.os_type is OsType.WINDOWS

    async def test_unknown_desktop_protocol_is_unsupported(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        with pytest.raises(Unsupported):
            await driver.desktop_endpoint("0", "carrier-pigeon")
        for protocol in DesktopProtocol:
            if protocol not in driver.capabilities.desktop_protocols:
                with pytest.raises(Unsupported):
                    await driver.desktop_endpoint("0", protocol)

    @staticmethod
    async def check_desktop_endpoints(target: ConformanceTarget, vm_id: str) -> None:
        """The running VM ``vm_id``'s desktop, with the default and each declared protocol.

        Once the VM runs and its agent answers (when the driver has one), the desktop's
        endpoint is known within the suite's timeout, and every answer is a valid endpoint
        whose protocol the driver declares and whose ``repr`` shows no secret.
        """
        driver = target.driver

        async def known() -> bool:
            try:
                await driver.desktop_endpoint(vm_id)
            except AgentNotRunning:
                return False
            return True

        await eventually(known, within=target.timeout, what="the desktop's endpoint")
        for preference in (None, *driver.capabilities.desktop_protocols):
            endpoint = await driver.desktop_endpoint(vm_id, preference)
            assert isinstance(endpoint, DesktopEndpoint)
            assert endpoint.protocol in driver.capabilities.desktop_protocols
            assert endpoint.host
            assert 0 < endpoint.port < 65536
            assert all(isinstance(value, str) for value in endpoint.parameters.values())
            shown = repr(endpoint)
            assert "credentials" in shown
            for secret in endpoint.credentials.values():
                assert secret not in shown

    # ------------------------------------------------------------------ ownership

    @pytest.mark.parametrize("operation", DESTRUCTIVE_OPERATIONS)
    async def test_destructive_calls_refuse_a_template(
        self, conformance_driver: ConformanceTarget, operation: str
    ) -> None:
        driver = conformance_driver.driver
        template = await template_named(conformance_driver, conformance_driver.template)
        with pytest.raises(NotOwned):
            await getattr(driver, operation)(template.id)
        assert template.id in {t.id for t in await driver.list_templates()}

    @pytest.mark.parametrize("operation", DESTRUCTIVE_OPERATIONS)
    async def test_destructive_calls_refuse_another_desktops_vm(
        self, conformance_driver: ConformanceTarget, operation: str
    ) -> None:
        driver = conformance_driver.driver
        async with cloned_vm(conformance_driver) as (vm, desktop_id):
            await driver.start(vm.id)
            with pytest.raises(NotOwned):
                await getattr(driver, operation)(vm.id, desktop_id=new_desktop_id())
            after = await driver.get_vm(vm.id)
            assert after.desktop_id == desktop_id
            assert after.power_state is PowerState.RUNNING

    # ------------------------------------------------------------------ missing VMs

    @pytest.mark.parametrize(
        "operation",
        ["get_vm", "power_state", "start", "delete", "stop", "shutdown", "reset"],
    )
    async def test_calls_on_a_deleted_vm_raise_vm_not_found(
        self, conformance_driver: ConformanceTarget, operation: str
    ) -> None:
        driver = conformance_driver.driver
        async with cloned_vm(conformance_driver) as (vm, desktop_id):
            await driver.delete(vm.id, desktop_id=desktop_id)
            with pytest.raises(VmNotFound):
                await getattr(driver, operation)(vm.id)

    # ------------------------------------------------------------------ time and cancellation

    async def test_a_passed_deadline_raises_driver_timeout(
        self, conformance_driver: ConformanceTarget
    ) -> None:
        driver = conformance_driver.driver
        with pytest.raises(DriverTimeout):
            await driver.list_nodes(deadline=time.monotonic() - 1.0)
        template = await template_named(conformance_driver, conformance_driver.template)
        desktop_id = new_desktop_id()
        try:
            with pytest.raises(DriverTimeout):
                await driver.clone(
                    template.id,
                    name=vm_name(desktop_id),
                    desktop_id=desktop_id,
                    linked=driver.capabilities.linked_clone,
                    deadline=time.monotonic(),
                )
            assert await driver.list_nodes()  # still usable
        finally:
            await remove_desktops(conformance_driver, desktop_id)

    @pytest.mark.parametrize("yields", [0, 1, 5, 20])
    async def test_a_cancelled_clone_raises_cancelled_and_leaves_only_owned_vms(
        self, conformance_driver: ConformanceTarget, yields: int
    ) -> None:
        driver = conformance_driver.driver
        desktop_id = new_desktop_id()
        try:
            task = asyncio.create_task(clone_for(conformance_driver, desktop_id))
            for _ in range(yields):
                await asyncio.sleep(0)
            if task.done():
                await task  # finished before the cancel: nothing to test at this point
                return
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await driver.list_nodes()  # the driver still works
            for vm in await driver.list_owned_vms():
                if vm.name == vm_name(desktop_id):
                    assert vm.desktop_id == desktop_id
        finally:
            await remove_desktops(conformance_driver, desktop_id)
