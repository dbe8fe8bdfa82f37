"""The ops listener: /healthz, /readyz (naming failing checks) and /metrics."""

from __future__ import annotations

from typing import Any

from deskpool.ops import create_ops_app
from deskpool.runtime import Runtime
from deskpool.testing.services import ServiceAddresses, create_test_database, drop_test_database


async def test_healthz_readyz_and_metrics(runtime: Runtime, aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_ops_app(runtime))
    health = await client.get("/healthz")
    assert health.status == 200
    assert (await health.json()) == {"status": "ok"}
    ready = await client.get("/readyz")
    body = await ready.json()
    assert ready.status == 200, body
    assert body["status"] == "ready"
    assert {"database", "kvstore", "schema", "components"} <= set(body["checks"])
    metrics = await client.get("/metrics")
    assert metrics.status == 200
    assert "process_cpu_seconds_total" in await metrics.text()


async def test_readyz_names_the_schema_check_when_migrations_are_pending(
    make_config: Any, test_servers: ServiceAddresses, aiohttp_client: Any
) -> None:
    url = await create_test_database(test_servers.admin_url)
    try:
        process = make_config(DATABASE_URL=url)
        runtime = Runtime(process.config, process.plugins)
        await runtime.open(require_current_schema=False)
        try:
            client = await aiohttp_client(create_ops_app(runtime))
            ready = await client.get("/readyz")
            body = await ready.json()
            assert ready.status == 503
            assert body["failing"] == ["schema"]
            assert "pending migrations" in body["checks"]["schema"]["error"]
            # A scrape runs the checks too: the failing one is 0 in /metrics (the shipped
            # DeskpoolDependencyDown alert), the passing ones 1.
            scraped = await (await client.get("/metrics")).text()
            assert 'deskpool_readiness_check_ok{check="schema"} 0.0' in scraped
            assert 'deskpool_readiness_check_ok{check="database"} 1.0' in scraped
        finally:
            await runtime.close()
    finally:
        await drop_test_database(test_servers.admin_url, url)
