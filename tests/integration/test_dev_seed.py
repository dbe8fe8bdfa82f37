"""``deskpool dev``'s demo says what it skipped and why (issue 37's quick start).

On a database that already has a cluster, the demo cluster and pool were skipped in silence (a
``make run HYPERVISOR=libvirt`` on the simulator's database showed no libvirt desktop, and
nothing said why). Here :func:`deskpool.dev.seed_demo` talks to a small API that lists one
cluster: it creates nothing and says, at WARNING, which cluster is there and what to do.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from deskpool.dev import DEMO_CLUSTER, DEMO_POOL, Demo, seed_demo


async def test_the_demo_says_it_is_skipped_on_a_database_with_a_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    posted: list[str] = []

    async def clusters(request: web.Request) -> web.Response:
        if request.method == "POST":
            posted.append(request.path)
            return web.json_response({}, status=500)
        return web.json_response({"items": [{"id": "c1", "name": "simulator"}], "next": None})

    app = web.Application()
    app.router.add_route("*", "/api/v1/clusters", clusters)
    server = TestServer(app)
    await server.start_server()
    libvirt: dict[str, Any] = {**DEMO_CLUSTER, "name": "libvirt", "driver": "libvirt"}
    try:
        with caplog.at_level(logging.INFO, logger="deskpool.dev"):
            await seed_demo(str(server.make_url("")), "token", Demo(libvirt, DEMO_POOL))
    finally:
        await server.close()
    assert posted == []
    [skipped] = [r for r in caplog.records if "not created" in r.getMessage()]
    assert skipped.levelno == logging.WARNING
    assert skipped.getMessage() == (
        "the libvirt demo cluster 'libvirt' and its pool 'demo-linux' were not created: the "
        "database already has 1 cluster (simulator); use an empty database for the demo "
        "(DATABASE_URL=postgresql://.../another make run), or add a cluster from the console"
    )
