"""A cold sign-in is one statement: the user written and its principal read (issue 27).

The principal it resolves must be the one the statement-by-statement resolution gives (the
groups by membership and by a bound claim, their grants, custom roles, the token's roles), the
first sign-in's ``user.create`` event is written by the same statement, and nothing is read
from a cache: a grant made between two sign-ins is in the second one's principal.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import asyncpg
from tests.support.statement_log import statements_of

from deskpool.auth import VerifiedToken
from deskpool.identity.sign_in import _created_event, resolve_effective, sign_in

ISSUER = "https://issuer.sign-in.test"


def token(subject: str, **claims: Any) -> VerifiedToken:
    """A verified token of ``subject`` with ``claims``."""
    return VerifiedToken.from_claims(
        {"iss": ISSUER, "sub": subject, "aud": "deskpool", "exp": 2_000_000_000, **claims}
    )


async def test_a_first_sign_in_is_one_statement_and_resolves_what_the_database_says(
    db: asyncpg.Connection, make_config: Callable[..., Any]
) -> None:
    config = make_config().config
    tag = secrets.token_hex(4)
    member_group = await db.fetchval(
        "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id", f"members-{tag}"
    )
    claim_group = await db.fetchval(
        "INSERT INTO groups (key, name) VALUES ($1, $1) RETURNING id", f"claimed-{tag}"
    )
    await db.execute(
        "INSERT INTO oidc_group_bindings (claim_value, group_id) VALUES ($1, $2)",
        f"claim-{tag}",
        claim_group,
    )
    await db.execute(
        "INSERT INTO roles (key, description, permissions) VALUES ($1, 'custom', $2)",
        f"custom-{tag}",
        ["reports:read"],
    )
    await db.execute(
        "INSERT INTO grants (subject_type, subject_id, role_key) VALUES ('group', $1, $2)",
        claim_group,
        f"custom-{tag}",
    )
    await db.execute(
        "INSERT INTO grants (subject_type, subject_id, permission) "
        "VALUES ('group', $1, 'pools:manage')",
        member_group,
    )
    first = token(
        f"cold-{tag}", email=f"cold-{tag}@example.test", groups=[f"claim-{tag}"], roles=["auditor"]
    )

    principal, sent = await statements_of(db, lambda: sign_in(db, config, first))

    assert len(sent) == 1, sent
    assert not db.is_in_transaction()
    assert [group.key for group in principal.groups] == [f"claimed-{tag}"]
    assert principal.may("reports:read")
    assert not principal.may("pools:manage")
    events = await db.fetch(
        "SELECT actor, resource_id, details FROM audit_events "
        "WHERE action = 'user.create' AND resource_id = $1",
        principal.id,
    )
    assert [(event["actor"], event["resource_id"]) for event in events] == [
        (principal.id, principal.id)
    ]
    # The details the statement builds are those of the statement-by-statement path's event.
    assert (
        json.loads(events[0]["details"])
        == _created_event(
            principal.id, ISSUER, f"cold-{tag}", f"cold-{tag}@example.test", "human"
        ).details
    )

    # Made a member of a group between two sign-ins: the second one sees it (no cache), and
    # writes no second user.create event.
    await db.execute(
        "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2::uuid)",
        member_group,
        principal.id,
    )
    again, sent = await statements_of(db, lambda: sign_in(db, config, first))

    assert len(sent) == 1, sent
    assert again.id == principal.id
    assert [group.key for group in again.groups] == [f"claimed-{tag}", f"members-{tag}"]
    assert again.may("pools:manage")
    assert again.may("reports:read")
    created = await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE action = 'user.create' AND resource_id = $1",
        principal.id,
    )
    assert created == 1
    groups, effective = await resolve_effective(db, principal.id, first.groups, first.roles)
    assert again.groups == groups
    assert again.effective == effective


async def test_a_bootstrap_admin_signs_in_as_before(
    db: asyncpg.Connection, make_config: Callable[..., Any]
) -> None:
    subject = f"boot-{secrets.token_hex(4)}"
    config = make_config(AUTH_BOOTSTRAP_ADMIN_SUBJECTS=subject).config

    principal = await sign_in(db, config, token(subject))

    assert principal.may("platform:admin")
    actions = await db.fetch(
        "SELECT action FROM audit_events WHERE resource_id = $1 OR details->>'user' = $1 "
        "ORDER BY id",
        principal.id,
    )
    assert [row["action"] for row in actions] == ["user.create", "grant.create"]
