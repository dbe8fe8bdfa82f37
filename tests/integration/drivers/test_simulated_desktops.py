"""A simulated VM's desktop endpoint leads the desktop daemon simulator to that VM's desktop."""

from __future__ import annotations

import asyncio

from deskpool.desktopd import DesktopDaemonSimulator
from deskpool.drivers import ClusterConnection, DriverContext, InMemorySharedState
from deskpool.guacamole.handshake import ClientInfo, perform_handshake
from deskpool.guacamole.stream import InstructionReader
from deskpool_driver_simulator import SimulatorDriver


async def test_the_desktop_endpoint_opens_the_vms_desktop_in_the_daemon_simulator(
    desktop_daemon: DesktopDaemonSimulator,
) -> None:
    driver = SimulatorDriver(
        ClusterConnection("simulator://desktops", options={"boot_seconds": 0, "agent_seconds": 0}),
        DriverContext(InMemorySharedState(), cluster_id="desktops"),
    )
    vm = await driver.clone("9000", name="lab-007", desktop_id="d7")
    await driver.start(vm.id)
    endpoint = await driver.desktop_endpoint(vm.id)
    # What the gateway sends: the protocol in select, the endpoint as connection arguments.
    arguments = {
        "hostname": endpoint.host,
        "port": str(endpoint.port),
        **endpoint.parameters,
        **endpoint.credentials,
    }
    stream, writer = await asyncio.open_connection(desktop_daemon.host, desktop_daemon.port)
    reader = InstructionReader(stream)
    try:
        done = await perform_handshake(
            reader,
            writer,
            endpoint.protocol.value,
            arguments,
            ClientInfo(name="Ada"),
            within=5,
        )
        assert done.connection_id.startswith("$")
        async with asyncio.timeout(5):
            first = await reader.read()
    finally:
        writer.close()
        await driver.close()
    assert (first.opcode, first.args) == ("name", ("lab-007",))  # the VM's own desktop
