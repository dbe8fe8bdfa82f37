"""SQL of a sign-in: the user written and its principal read, in one statement.

A request with a token the process has not seen resolves a principal: the user is created (at
its first sign-in) or refreshed, and its groups, its grants, its groups' grants and the custom
roles are read. :func:`sign_in_user` does all of it in one statement, so a cold request costs
one database round trip and one commit, not a transaction of five statements: the reads share
the statement's snapshot and see the database as it is (nothing comes from a cache), and the
first sign-in's ``user.create`` audit event is inserted by the same statement, so the user
and its event commit together (with the event's webhook outbox rows,
:func:`deskpool.audit.outbox_insert`). A bootstrap admin's first sign-in, which also grants a role,
is not done here (see :mod:`deskpool.identity.sign_in`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from deskpool.audit import AUDIT_TABLE, outbox_insert
from deskpool.events import event_type, subscription_keys
from deskpool.identity.store import UPSERT_USER_CTES, UserFields, UserRow, user_row
from deskpool.identity.store_roles import GRANTS_AND_ROLES_SQL, grants_and_roles
from deskpool.permissions import Grant, Role

#: Why a user stored before users had kinds took the kind of its first sign-in since (the
#: ``user.update`` event of that sign-in).
SETTLED_REASON = "first sign-in since users are keyed by kind; the user stored before took its kind"
#: The action of a user's first sign-in, and why its event says the user was created.
CREATED_ACTION = "user.create"
CREATED_REASON = "first sign-in"


def created_details(
    issuer: str, subject: str, email: str | None, kind: str
) -> dict[str, str | None]:
    """The details of a first sign-in's ``user.create`` event (as :data:`_SIGN_IN` writes them)."""
    return {
        "reason": CREATED_REASON,
        "issuer": issuer,
        "subject": subject,
        "email": email,
        "kind": kind,
    }


def _text(value: str) -> str:
    """``value`` as an SQL string literal (a constant of this module, never a request's)."""
    return "'" + value.replace("'", "''") + "'"


def _texts(values: list[str]) -> str:
    """``values`` as an SQL ``text[]`` literal."""
    return "ARRAY[" + ", ".join(map(_text, values)) + "]::text[]"


#: What the first sign-in's ``user.create`` event is to webhook subscribers, and the settling
#: sign-in's ``user.update``: constants, written into the statement rather than sent with each
#: sign-in (issue 39: the cold ``GET /me`` built and sent them every time).
_CREATED_TYPE = _text(event_type(CREATED_ACTION, "success"))
_CREATED_KEYS = _texts(subscription_keys(CREATED_ACTION, "success"))
_SETTLED_TYPE = _text(event_type("user.update", "success"))
_SETTLED_KEYS = _texts(subscription_keys("user.update", "success"))

#: The ``user.create`` event's details, as :func:`created_details` gives them.
_CREATED_DETAILS = (
    f"jsonb_build_object('reason', {_text(CREATED_REASON)}, 'issuer', $2::text, "
    "'subject', $3::text, 'email', $4::text, 'kind', $8::text)"
)

_SIGN_IN = f"""
WITH {UPSERT_USER_CTES},
audited AS (
    INSERT INTO {AUDIT_TABLE} (occurred_at, actor, action, resource_type, resource_id,
                               outcome, request_id, source_address, details)
    SELECT $9, u.id::text, {_text(CREATED_ACTION)}, 'users', u.id::text, 'success', NULL, NULL,
           {_CREATED_DETAILS}
      FROM upserted u WHERE u.created
    RETURNING *
),
audited_outbox AS ({
    outbox_insert(
        "audited", type_sql=_CREATED_TYPE, keys_sql=_CREATED_KEYS, timestamp_sql="$10::text"
    )
}),
settled_audited AS (
    INSERT INTO {AUDIT_TABLE} (occurred_at, actor, action, resource_type, resource_id,
                               outcome, request_id, source_address, details)
    SELECT $9, u.id::text, 'user.update', 'users', u.id::text, 'success', NULL, NULL,
           jsonb_build_object('kind', u.kind, 'reason', '{SETTLED_REASON}')
      FROM upserted u WHERE u.settled
    RETURNING *
),
settled_outbox AS ({
    outbox_insert(
        "settled_audited", type_sql=_SETTLED_TYPE, keys_sql=_SETTLED_KEYS, timestamp_sql="$10::text"
    )
}),
user_groups AS (
    SELECT g.id, g.key, 'member' AS via FROM groups g
      JOIN group_members m ON m.group_id = g.id
      JOIN upserted u ON m.user_id = u.id
    UNION
    SELECT g.id, g.key, 'claim' AS via FROM groups g
      JOIN oidc_group_bindings b ON b.group_id = g.id AND b.claim_value = ANY($6::text[])
)
SELECT u.id, u.issuer, u.subject, u.kind, u.email, u.display_name, u.disabled, u.created,
       u.settled,
       (SELECT coalesce(json_agg(json_build_array(g.id, g.key, g.via) ORDER BY g.key, g.via DESC),
                        '[]')
          FROM user_groups g) AS groups,
{GRANTS_AND_ROLES_SQL}
  FROM upserted u
"""


@dataclass(frozen=True)
class SignedIn:
    """What one sign-in statement wrote and read."""

    user: UserRow
    #: (id, key, via) of the user's groups, by membership or by a bound claim, each once
    #: (membership first), ordered by key.
    groups: list[tuple[str, str, str]]
    user_grants: list[Grant]
    group_grants: list[Grant]
    #: Every defined role: the built-in ones and the custom ones.
    roles: dict[str, Role]


async def sign_in_user(
    connection: asyncpg.Connection,
    fields: UserFields,
    *,
    occurred_at: datetime,
    new_id: uuid.UUID,
) -> SignedIn:
    """Create or refresh the user and read what its principal is made of, in one statement.

    The user is written as :func:`~deskpool.identity.store.upsert_user` writes it; the
    statement is atomic on its own (no transaction needed). Creating the user records its
    ``user.create`` event (actor and resource the created user's id, ``new_id``; details
    :func:`created_details`), settling it a ``user.update`` event, both at ``occurred_at``.
    """
    row = await connection.fetchrow(
        _SIGN_IN, *fields.parameters(new_id), occurred_at, occurred_at.isoformat()
    )
    assert row is not None
    user = user_row(row)
    seen: dict[str, tuple[str, str, str]] = {}
    for group_id, key, via in json.loads(row["groups"]):
        seen.setdefault(str(group_id), (str(group_id), key, via))
    user_grants, group_grants, roles = grants_and_roles(row)
    return SignedIn(user, list(seen.values()), user_grants, group_grants, roles)
