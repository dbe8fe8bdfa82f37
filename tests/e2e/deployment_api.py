"""Calls to a running api process, as one caller, for the end-to-end tests."""

from __future__ import annotations

from typing import Any

import aiohttp

from deskpool.testing.processes import DeskpoolProcess

#: Fast simulated phases: a (re)built desktop is ready within a second.
FAST_SIMULATOR = {
    "clone_seconds": 0.05,
    "boot_seconds": 0.05,
    "agent_seconds": 0.05,
    "oobe_seconds": 0.05,
    "shutdown_seconds": 0.05,
}


class Api:
    """Calls to one api process as one caller."""

    def __init__(
        self, http: aiohttp.ClientSession, process: DeskpoolProcess | str, token: str
    ) -> None:
        """``process``: the api process, or the URL it serves the API at."""
        self.http = http
        base = process if isinstance(process, str) else process.url("api")
        self.base = f"{base}/api/v1"
        self.headers = {"Authorization": f"Bearer {token}"}

    async def status(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        """The status and the JSON body of a call, whatever the status."""
        async with self.http.request(
            method, self.base + path, headers=self.headers, **kw
        ) as response:
            return response.status, await response.json(content_type=None)

    async def __call__(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON body of a call that must succeed."""
        status, body = await self.status(method, path, **kw)
        assert status < 300, (method, path, status, body)
        return body

    async def simulated_cluster(self, name: str) -> Any:
        """Connect a simulated cluster named ``name`` (with :data:`FAST_SIMULATOR` phases)."""
        body = {
            "name": name,
            "driver": "simulator",
            "endpoint": f"simulator://{name}",
            "options": FAST_SIMULATOR,
        }
        return await self("POST", "/clusters", json=body)
