"""The real PostgreSQL and Redis servers that tests use, and a database per test run.

A server that does not answer is a failing test whose message says how to start it, never a
skip.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import redis.asyncio as redis

#: The server tests connect to; the database in the URL is only used to create test databases.
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_KV_ADDR = "127.0.0.1:6379"

START_POSTGRES = (
    "start PostgreSQL (`make services`, or `pg_ctlcluster --skip-systemctl-redirect "
    "$(ls /etc/postgresql) main start`), or point DESKPOOL_TEST_DATABASE_URL at a server"
)
START_REDIS = (
    "start Redis (`make services`, or `redis-server --daemonize yes --bind 127.0.0.1 "
    "--port 6379 --save ''`), or point DESKPOOL_TEST_KVSTORE_ADDR at a server"
)


class ServiceMissing(Exception):
    """A server the tests need does not answer."""


@dataclass(frozen=True)
class ServiceAddresses:
    """Where the test servers are."""

    admin_url: str
    kv_addr: str

    @classmethod
    def from_environ(cls) -> ServiceAddresses:
        """Read ``DESKPOOL_TEST_DATABASE_URL`` and ``DESKPOOL_TEST_KVSTORE_ADDR``."""
        return cls(
            admin_url=os.environ.get("DESKPOOL_TEST_DATABASE_URL", DEFAULT_ADMIN_URL),
            kv_addr=os.environ.get("DESKPOOL_TEST_KVSTORE_ADDR", DEFAULT_KV_ADDR),
        )


def database_url(admin_url: str, name: str) -> str:
    """``admin_url`` pointing at database ``name`` instead."""
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def create_test_database(admin_url: str, prefix: str = "deskpool_test") -> str:
    """Create a fresh, empty database and return its URL."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    try:
        connection = await asyncpg.connect(admin_url, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        raise ServiceMissing(
            f"PostgreSQL does not answer at {urlsplit(admin_url).netloc}: {error}; {START_POSTGRES}"
        ) from None
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    return database_url(admin_url, name)


async def drop_test_database(admin_url: str, url: str) -> None:
    """Drop a database made by :func:`create_test_database`, closing its connections."""
    name = urlsplit(url).path.lstrip("/")
    connection = await asyncpg.connect(admin_url, timeout=5)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


async def check_kvstore(addr: str) -> None:
    """Fail with a message saying how to start Redis when it does not answer."""
    host, _, port = addr.rpartition(":")
    client = redis.Redis(host=host, port=int(port), socket_connect_timeout=3)
    try:
        await client.ping()
    except (OSError, redis.RedisError) as error:
        raise ServiceMissing(f"Redis does not answer at {addr}: {error}; {START_REDIS}") from None
    finally:
        await client.aclose()
