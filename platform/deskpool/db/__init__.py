"""PostgreSQL: the connection pool and the schema migrations.

SQL lives in numbered migration files (``migrations/NNNN_name.sql``) and in small repository
modules per aggregate; there is no ORM. :func:`migrate` applies the pending migrations in order,
each once, in its own transaction, under a PostgreSQL advisory lock so that two processes
migrating at the same time do not collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.resources
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import asyncpg

from deskpool.errors import SchemaOutOfDate, StartupError

if TYPE_CHECKING:
    from deskpool.config import Config

#: Key of the advisory lock held while migrating (an arbitrary constant: "deskpool" in ASCII).
MIGRATION_LOCK_KEY = 0x6465736B706F6F6C

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One SQL migration file."""

    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        """``0001_core`` style label."""
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        """SHA-256 of the SQL, recorded when applied."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class SchemaStatus:
    """Which migrations are applied and which are pending."""

    applied: list[str]
    pending: list[str]


def known_migrations() -> list[Migration]:
    """Every migration shipped with this version, in order."""
    folder = importlib.resources.files("deskpool.db") / "migrations"
    migrations = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            migrations.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    migrations.sort(key=lambda m: m.version)
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise StartupError(f"two migrations share a number: {versions}")
    return migrations


def describe_database(url: str) -> str:
    """``host:port/dbname`` of a connection URL, for messages (never the password)."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 5432}{parts.path or '/'}"


#: How long opening a pool connection is tried again while the server has no room for one.
REFUSED_CONNECTION_PATIENCE = 5.0


async def connect_patiently(*args: Any, **kwargs: Any) -> asyncpg.Connection:
    """:func:`asyncpg.connect`, tried again for a while when the server has no room for it.

    The pool opens connections as a burst of requests needs them. When the server refuses one
    because it holds as many as it allows (``max_connections``, a role's or a database's
    connection limit: SQLSTATE 53300), the request that asked for it would fail (a 503) though
    the server is up and the pool's other connections go on serving. It waits instead, trying
    again after 50 ms, then twice as long each time up to 1 s, for
    :data:`REFUSED_CONNECTION_PATIENCE` seconds; then the refusal goes to the request.
    """
    delay = 0.05
    deadline = time.monotonic() + REFUSED_CONNECTION_PATIENCE
    while True:
        try:
            connection: asyncpg.Connection = await asyncpg.connect(*args, **kwargs)
            return connection
        except asyncpg.TooManyConnectionsError:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def connect_pool(config: Config, *, bounded: bool = True) -> asyncpg.Pool:
    """Open the connection pool sized by ``DATABASE_MAX_CONNS``.

    New connections are opened by :func:`connect_patiently`. A ``bounded`` pool (every
    process's) waits ``DATABASE_ACQUIRE_TIMEOUT`` at most for a connection and
    ``DATABASE_STATEMENT_TIMEOUT`` for a statement (see :mod:`deskpool.db.bounded`); migrations
    and operators' commands use an unbounded one (they may rewrite a large table).

    :raises StartupError: naming the server (never the password) when it cannot be reached.
    """
    from deskpool.db.bounded import CLIENT_MARGIN, CONNECT_TIMEOUT, BoundedPool, release_reset

    url = config["DATABASE_URL"]
    size = config["DATABASE_MAX_CONNS"]
    try:
        if bounded:
            # Read only here: an operator's command builds its configuration from the
            # database settings alone, which need not declare the bounds it does not use.
            acquire = config.duration("DATABASE_ACQUIRE_TIMEOUT")
            statement = config.duration("DATABASE_STATEMENT_TIMEOUT")
            pool = await BoundedPool(
                url,
                acquire_timeout=acquire,
                min_size=min(1, size),
                max_size=size,
                max_queries=50_000,
                max_inactive_connection_lifetime=300.0,
                timeout=CONNECT_TIMEOUT,
                command_timeout=statement + CLIENT_MARGIN,
                server_settings={"statement_timeout": str(int(statement * 1000))},
                connect=connect_patiently,
                reset=release_reset,
                loop=None,
                record_class=asyncpg.Record,
            )
        else:
            pool = await asyncpg.create_pool(
                url,
                min_size=min(1, size),
                max_size=size,
                timeout=10,
                command_timeout=None,
                connect=connect_patiently,
                reset=release_reset,
            )
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        raise StartupError(
            f"cannot connect to PostgreSQL at {describe_database(url)} (DATABASE_URL): "
            f"{type(error).__name__}: {error}"
        ) from None
    assert pool is not None
    return pool


_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


async def _applied_versions(connection: asyncpg.Connection) -> dict[int, str]:
    exists = await connection.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return {}
    rows = await connection.fetch("SELECT version, name FROM schema_migrations")
    return {row["version"]: row["name"] for row in rows}


async def schema_status(pool: asyncpg.Pool) -> SchemaStatus:
    """Compare the applied migrations with those shipped in this version."""
    async with pool.acquire() as connection:
        applied = await _applied_versions(connection)
    known = known_migrations()
    return SchemaStatus(
        applied=[m.label for m in known if m.version in applied],
        pending=[m.label for m in known if m.version not in applied],
    )


@contextlib.asynccontextmanager
async def current_pool(config: Config) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool to a database whose schema is current, closed on the way out.

    What a command that reads or changes data opens (``deskpool admin grant``, ``deskpool
    secrets ...``): it refuses a database that migrations have not caught up with. Its
    statements are not bounded (an operator's command may rewrite many rows, or wait for a lock).

    :raises SchemaOutOfDate: naming the pending migrations.
    """
    pool = await connect_pool(config, bounded=False)
    try:
        status = await schema_status(pool)
        if status.pending:
            raise SchemaOutOfDate(
                f"the database schema is behind this version of deskpool "
                f"({', '.join(status.pending)} pending); run `deskpool migrate` first"
            )
        yield pool
    finally:
        await pool.close()


async def migrate(connection: asyncpg.Connection) -> list[str]:
    """Apply every pending migration, in order, under the migration advisory lock.

    Idempotent: a second run applies nothing. Returns the labels applied by this call.
    """
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await connection.execute(_CREATE_LEDGER)
        applied = await _applied_versions(connection)
        done = []
        for migration in known_migrations():
            if migration.version in applied:
                continue
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            done.append(migration.label)
        return done
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
