"""A sign-in writes only when something changed (issue 39, Build 4).

A token of a user whose row is current (same email, name and claims, seen less than
``LAST_SEEN_INTERVAL`` ago) costs one read: no transaction id, so no flushed commit. A claim
that changed is written at once (revocation judges a user away by the claims kept), and the
last sign-in at most once per interval. Counted in the statement log of a private server
(:mod:`tests.support.statement_log`), through a pool as the api's authenticator uses it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.statement_log import LoggedDatabase

from deskpool.auth import VerifiedToken
from deskpool.db import connect_pool
from deskpool.identity.principal import Principal
from deskpool.identity.sign_in import sign_in
from deskpool.identity.store import LAST_SEEN_INTERVAL

ISSUER = "https://issuer.sign-in-writes.test"


@pytest.fixture(scope="module")
def migrated_database_url(logged: LoggedDatabase) -> str:
    return logged.url


def token(subject: str, **claims: Any) -> VerifiedToken:
    return VerifiedToken.from_claims(
        {"iss": ISSUER, "sub": subject, "aud": "deskpool", "exp": 2_000_000_000, **claims}
    )


async def test_a_repeat_sign_in_is_one_read_and_a_change_is_written(
    logged: LoggedDatabase, make_config: Callable[..., Any]
) -> None:
    config = make_config().config
    pool = await connect_pool(make_config(DATABASE_MAX_CONNS="2").config)
    subject = f"repeat-{secrets.token_hex(4)}"
    claims = {"email": f"{subject}@example.test", "name": "Repeat", "groups": ["staff"]}

    async def signed(verified: VerifiedToken) -> tuple[Principal, Any]:
        mark = logged.log.mark()
        async with pool.acquire() as connection:
            principal = await sign_in(connection, config, verified)
        return principal, logged.log.since(mark)

    try:
        first, created = await signed(token(subject, **claims))
        assert created.flushed_commits == 1
        seen = await pool.fetchval("SELECT last_seen_at FROM users WHERE id = $1::uuid", first.id)

        again, repeat = await signed(token(subject, **claims))
        assert again.id == first.id
        assert again.claimed_groups == ("staff",)
        assert repeat.round_trips <= 2, "\n".join(repeat.texts())
        assert repeat.flushed_commits == 0, "\n".join(repeat.texts())
        assert (
            await pool.fetchval("SELECT last_seen_at FROM users WHERE id = $1::uuid", first.id)
            == seen
        )

        # A claim that changed is written at once: revocation reads the claims kept.
        moved, changed = await signed(token(subject, **{**claims, "groups": ["staff", "lab"]}))
        assert changed.flushed_commits == 1
        kept = await pool.fetchval("SELECT claimed_groups FROM users WHERE id = $1::uuid", moved.id)
        assert kept == ["staff", "lab"]

        # The last sign-in: written again once the interval has passed.
        await pool.execute(
            f"UPDATE users SET last_seen_at = now() - interval '{LAST_SEEN_INTERVAL}' "
            "- interval '1 second' WHERE id = $1::uuid",
            first.id,
        )
        _, late = await signed(token(subject, **{**claims, "groups": ["staff", "lab"]}))
        assert late.flushed_commits == 1
        assert await pool.fetchval(
            "SELECT last_seen_at > now() - interval '1 minute' FROM users WHERE id = $1::uuid",
            first.id,
        )
    finally:
        await pool.close()
