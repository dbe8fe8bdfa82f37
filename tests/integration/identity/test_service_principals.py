"""A client of the client credentials grant and a person with the same ``sub`` are two users.

The finding of issue 33 §9: deskpool keyed users by issuer and subject alone, so a person whose
``sub`` equals a client's id (many identity providers let subjects be chosen: usernames) signed
in as the client's user and held its grants. The client here gets its token from the test
identity provider's token endpoint, as a real client does; the person's token is the one the
console's sign-in gives (``client_id`` is the console's).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

import aiohttp
import pytest
from tests.support.identity import Directory, Person

from deskpool.testing.idp import DEFAULT_CLIENT_ID


@pytest.fixture
async def admin(directory: Directory) -> Person:
    return await directory.person(roles=["platform_admin"])


async def client_credentials_token(identity_provider: Any, client_id: str, secret: str) -> str:
    """An access token from the issuer's token endpoint (client credentials, HTTP Basic)."""
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            identity_provider.issuer_url + "/token",
            data={"grant_type": "client_credentials", "scope": "deskpool"},
            headers={"Authorization": "Basic " + basic},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        body = await response.json()
    token: str = body["access_token"]
    return token


def as_caller(subject: str, token: str) -> Person:
    return Person("", subject, {"Authorization": f"Bearer {token}"})


async def grant(directory: Directory, admin: Person, user_id: str, permission: str) -> None:
    body = {"subject_type": "user", "subject_id": user_id, "permission": permission}
    status, created = await directory.call(admin, "POST", "/api/v1/grants", body)
    assert status == 201, created


async def test_a_person_never_gets_a_clients_grants(
    directory: Directory, admin: Person, identity_provider: Any, bearer: Any
) -> None:
    client_id = f"robot-{secrets.token_hex(4)}"
    secret = identity_provider.add_client(client_id)
    client = as_caller(
        client_id, await client_credentials_token(identity_provider, client_id, secret)
    )
    client_me = await directory.me(client)
    assert client_me["subject"] == client_id
    await grant(directory, admin, client_me["id"], "pools:manage")
    assert "pools:manage" in (await directory.me(client))["permissions"]

    # A person whose subject is the client's id, signed in through the console.
    person = as_caller(
        client_id, bearer(client_id, client_id=DEFAULT_CLIENT_ID)["Authorization"][7:]
    )
    person_me = await directory.me(person)
    assert person_me["id"] != client_me["id"]
    assert person_me["permissions"] == []
    assert (await directory.call(person, "GET", "/api/v1/pools"))[0] == 403
    # A token without any client_id claim is a person's as well.
    bare = as_caller(client_id, bearer(client_id)["Authorization"][7:])
    assert (await directory.me(bare))["id"] == person_me["id"]

    rows = await directory.runtime.db.fetch(
        "SELECT id, kind FROM users WHERE issuer = $1 AND subject = $2 ORDER BY kind",
        identity_provider.issuer_url,
        client_id,
    )
    assert [(str(row["id"]), row["kind"]) for row in rows] == [
        (person_me["id"], "human"),
        (client_me["id"], "service"),
    ]
    status, listed = await directory.call(admin, "GET", f"/api/v1/users/{client_me['id']}")
    assert status == 200, listed
    assert listed["kind"] == "service"


async def test_a_client_never_gets_a_persons_grants(
    directory: Directory, admin: Person, identity_provider: Any
) -> None:
    person = await directory.person(permissions=["audit:read"])
    assert "audit:read" in (await directory.me(person))["permissions"]
    # A client registered with the person's subject as its id.
    secret = identity_provider.add_client(person.subject)
    token = await client_credentials_token(identity_provider, person.subject, secret)
    client_me = await directory.me(as_caller(person.subject, token))
    assert client_me["id"] != person.id
    assert client_me["permissions"] == []
    # Disabling the person leaves the client alone, and the other way round.
    path = f"/api/v1/users/{person.id}"
    assert (await directory.call(admin, "PATCH", path, {"disabled": True}))[0] == 200
    assert (await directory.me(as_caller(person.subject, token)))["id"] == client_me["id"]
    assert (await directory.call(person, "GET", "/api/v1/me"))[0] == 403
