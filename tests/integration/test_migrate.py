"""Migrations against the real PostgreSQL: in order, once each, under an advisory lock."""

from __future__ import annotations

import asyncio

import asyncpg

from deskpool.db import known_migrations, migrate
from deskpool.testing.services import ServiceAddresses, create_test_database, drop_test_database


async def test_migrate_is_idempotent_and_safe_concurrently(test_servers: ServiceAddresses) -> None:
    url = await create_test_database(test_servers.admin_url)
    try:
        connections = [await asyncpg.connect(url) for _ in range(3)]
        try:
            results = await asyncio.gather(*(migrate(c) for c in connections))
            applied = [label for result in results for label in result]
            assert sorted(applied) == [m.label for m in known_migrations()]
            assert await migrate(connections[0]) == []
            rows = await connections[0].fetch("SELECT version FROM schema_migrations ORDER BY 1")
            assert [r["version"] for r in rows] == [m.version for m in known_migrations()]
        finally:
            for connection in connections:
                await connection.close()
    finally:
        await drop_test_database(test_servers.admin_url, url)
