"""``python -m deskpool.desktopd [OPTIONS] [HOST:PORT]``: run the simulator alone.

Port 0 asks for a free port the system picks; the line ``desktop daemon simulator listening on
HOST:PORT`` says which.

``--bridge-vnc`` (repeatable) names a network whose VNC servers are real: a ``vnc`` connection
to an IP address in it shows that server through the VNC bridge (:mod:`deskpool.desktopd.vnc`)
instead of the simulated desktop. A development and test bridge; production runs guacd.
``--reuse-port`` listens with ``SO_REUSEPORT``: several simulator processes started on the same
address share the handshakes of a burst (the login storm benchmark starts several).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

from deskpool.config import parse_listen_address
from deskpool.desktopd.daemon import DesktopDaemonSimulator
from deskpool.desktopd.vnc import VncBridge


async def serve(address: str, bridge: VncBridge, reuse_port: bool = False) -> None:
    """Listen on ``address`` until interrupted."""
    where = parse_listen_address(address)
    daemon = DesktopDaemonSimulator(
        where.host, where.port, vnc_bridge=bridge, reuse_port=reuse_port
    )
    await daemon.start()
    print(f"desktop daemon simulator listening on {daemon.address}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await daemon.stop()


def main() -> None:
    """Parse the arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m deskpool.desktopd", description=__doc__)
    parser.add_argument("address", nargs="?", default="127.0.0.1:4822", help="HOST:PORT")
    parser.add_argument(
        "--bridge-vnc",
        action="append",
        default=[],
        metavar="NETWORK",
        help="bridge the real VNC servers at IP addresses in NETWORK (e.g. 127.0.0.0/8)",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="listen with SO_REUSEPORT (several simulator processes on one address)",
    )
    args = parser.parse_args()
    try:
        bridge = VncBridge.of(args.bridge_vnc)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.INFO)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.address, bridge, args.reuse_port))


if __name__ == "__main__":
    main()
