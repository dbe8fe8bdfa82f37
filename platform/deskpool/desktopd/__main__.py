"""``python -m deskpool.desktopd [HOST:PORT]``: run the desktop daemon simulator alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

from deskpool.config import parse_host_port
from deskpool.desktopd.daemon import DesktopDaemonSimulator


async def serve(address: str) -> None:
    """Listen on ``address`` until interrupted."""
    where = parse_host_port(address)
    daemon = DesktopDaemonSimulator(where.host, where.port)
    await daemon.start()
    print(f"desktop daemon simulator listening on {daemon.address}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await daemon.stop()


def main() -> None:
    """Parse the one optional argument and serve."""
    logging.basicConfig(level=logging.INFO)
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:4822"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(address))


if __name__ == "__main__":
    main()
