"""The license's sessions are bounded by a tally, not counted, far from the limit (issue 39).

Every opening counted the desktops with a session (4.6 of its statement's 5.3 ms at 889 of
them, ``auto_explain`` in the storm): O(users²) at 9 a.m. Migration 0037 keeps a tally as the
rows change, never below that count; an opening with the growth lock shared reads it, and
one it leaves in doubt opens again alone and counts. Checked here: the tally follows each
row through an opening's life (the token issued, redeemed, the session ended; a token that
expires unused once the job marks it lapsed), a shared opening reads the tally, a tally in
doubt is counted, never trusted to refuse, and the migration starts the tally from the rows an
installation already has. Its own module: a fresh database.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from unittest import mock

import asyncpg
from tests.support.sessions import Estate, connected_through, install_license, open_desktop

from deskpool.db import known_migrations
from deskpool.licensing import store as licensing
from deskpool.runtime import Runtime
from deskpool.sessions import store_logons, store_opening
from deskpool.sessions.broker import PlatformSessionBroker
from deskpool.sessions.tunnel import SessionEndReason
from deskpool.testing.licensing import TestVendor
from deskpool.testing.pytest_plugin import connected
from deskpool.testing.services import ServiceAddresses, create_test_database, drop_test_database

MakeEstate = Callable[..., Awaitable[Estate]]


async def _tally_and_count(runtime: Runtime) -> tuple[int, int]:
    """The tally's sum and the exact count of the desktops with a session."""
    async with runtime.db.acquire() as connection:
        tally = await connection.fetchval("SELECT sum(sessions) FROM license_session_tally")
        count = await connection.fetchval(f"SELECT {licensing.SESSIONS_COLUMN}")
    return int(tally), int(count)


async def test_the_tally_follows_each_row_that_counts_and_never_falls_below_the_count(
    client: Any, estate: MakeEstate, broker: PlatformSessionBroker, pools_runtime: Runtime
) -> None:
    place = await estate(ready=3)
    tally, count = await _tally_and_count(pools_runtime)
    assert tally >= count
    above = tally - count  # rows of earlier tests that no longer count but were not undone

    # An opening: its token counts until it is redeemed, then its session.
    opened, grant = await connected_through(client, broker, place, "gw-tally")
    assert await _tally_and_count(pools_runtime) == (tally + 1, count + 1)
    await broker.session_ended(grant.session_id, SessionEndReason.CLIENT_CLOSED, None)
    assert await _tally_and_count(pools_runtime) == (tally, count)

    # A token never used: counted by both until it expires; then by the tally alone until the
    # job that fails its logon marks it lapsed.
    await open_desktop(client, place)
    assert await _tally_and_count(pools_runtime) == (tally + 1, count + 1)
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE connection_tokens SET expires_at = now() - interval '1 second' "
            "WHERE redeemed_at IS NULL AND user_id = $1::uuid",
            place.user.id,
        )
        assert await _tally_and_count(pools_runtime) == (tally + 1, count)
        assert await store_logons.fail_unused_tokens(connection) == 1
    assert await _tally_and_count(pools_runtime) == (tally, count)
    assert opened["id"] in {str(desktop) for desktop in place.desktops}
    assert (tally - count) == above


async def test_a_shared_opening_reads_the_tally_and_one_in_doubt_counts(
    client: Any,
    estate: MakeEstate,
    pools_runtime: Runtime,
    license_vendor: TestVendor,
) -> None:
    await install_license(pools_runtime, license_vendor, sessions=50)
    place = await estate(ready=2)
    reads = mock.patch.object(store_opening, "read_candidates", wraps=store_opening.read_candidates)
    with reads as read_candidates:
        await open_desktop(client, place)
    assert [call.kwargs["exact"] for call in read_candidates.call_args_list] == [False]
    assert not pools_runtime.licensing.sessions_near_limit

    # A tally far above the count (as rows a crash left pending would make it) is not
    # trusted to refuse: the opening takes the lock alone and counts.
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE license_session_tally SET sessions = sessions + 1000 WHERE shard = 0"
        )
    other = await estate(ready=1)
    with reads as read_candidates:
        second = await open_desktop(client, other)
    assert [call.kwargs["exact"] for call in read_candidates.call_args_list] == [False, True]
    assert uuid.UUID(second["id"]) in other.desktops
    async with pools_runtime.db.acquire() as connection:
        await connection.execute(
            "UPDATE license_session_tally SET sessions = sessions - 1000 WHERE shard = 0"
        )


#: The migration that starts the tally.
TALLY = 37


async def _migrate(connection: asyncpg.Connection, *, below: int | None = None) -> None:
    """Apply the known migrations (those before ``below`` only, when given)."""
    for migration in known_migrations():
        if below is not None and migration.version >= below:
            continue
        if below is None and migration.version < TALLY:
            continue
        await connection.execute(migration.sql)


async def test_the_migration_starts_the_tally_from_the_rows_already_there(
    test_servers: ServiceAddresses,
) -> None:
    url = await create_test_database(test_servers.admin_url, "deskpool_tally")
    try:
        async with connected(url) as db:
            await _migrate(db, below=TALLY)
            user, pool = uuid.uuid4(), uuid.uuid4()
            sessions = [
                (uuid.uuid4(), ended, read_only)
                for ended, read_only in (("NULL", False), ("now()", False), ("NULL", True))
            ]
            for desktop, ended, read_only in sessions:  # open; ended; a read-only view
                await db.execute(
                    "INSERT INTO desktop_sessions (user_id, desktop_id, pool_id, desktop_name, "
                    f"protocol, gateway_id, read_only, ended_at) VALUES ($1, $2, $3, 'd', "
                    f"'vnc', 'gw', $4, {ended})",
                    user,
                    desktop,
                    pool,
                    read_only,
                )
            for expires, redeemed in (
                ("1 minute", "NULL"),
                ("-1 minute", "NULL"),
                ("1 minute", "now()"),
            ):
                await db.execute(  # pending; expired unused; used
                    "INSERT INTO connection_tokens (token_key, user_id, desktop_id, pool_id, "
                    "protocol, sealed_target, expires_at, redeemed_at) VALUES ($1, $2, $3, $4, "
                    f"'vnc', '\\x00', now() + interval '{expires}', {redeemed})",
                    uuid.uuid4().bytes,
                    user,
                    uuid.uuid4(),
                    pool,
                )
            for token_issued in ("NULL", "now()"):  # pending; its token issued
                await db.execute(
                    "INSERT INTO logons (id, user_id, pool_id, desktop_id, asked_at, "
                    f"allocated_at, token_issued_at) VALUES ($1, $2, $3, $4, now(), now(), "
                    f"{token_issued})",
                    uuid.uuid4(),
                    user,
                    pool,
                    uuid.uuid4(),
                )
            await _migrate(db)
            tally = await db.fetchval("SELECT sum(sessions) FROM license_session_tally")
            count = await db.fetchval(f"SELECT {licensing.SESSIONS_COLUMN}")
            lapsed = await db.fetchval("SELECT count(*) FROM connection_tokens WHERE lapsed")
            # The open session, the pending token and the pending logon: no more.
            assert (tally, count, lapsed) == (3, 3, 1)
    finally:
        await drop_test_database(test_servers.admin_url, url)
