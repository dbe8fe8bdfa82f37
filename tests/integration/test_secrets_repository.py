"""Sealed secrets in the real PostgreSQL: the repository, re-wrapping, and the API's handling.

Every test here uses a database of its own (``isolated_database_url``): sealed values left in
the run's shared database would stop the api from starting without a key in other tests.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from marshmallow import Schema, fields
from tests.secret_leak_guard import LeakGuard

from deskpool.api.context import Call
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.api.secret_fields import SecretInput, SecretStatusSchema
from deskpool.plugins import hookimpl
from deskpool.runtime import Runtime
from deskpool.secret_rotation import count_by_key_id, rewrap_all, rewrap_batch
from deskpool.secrets import (
    SecretContext,
    SecretDecryptionFailed,
    SecretKeyUnknown,
    SecretMetadata,
    SecretsUnavailable,
    SecretValue,
    delete_secret,
    delete_secrets_of,
    get_secret,
    put_secret,
    put_secrets,
    secret_metadata,
    secrets_metadata_of,
)
from deskpool_envelope.store import EnvelopeSecretStore, MasterKey

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)
PROBLEM = "application/problem+json"


def context(owner: str | uuid.UUID, field: str = "api_token") -> SecretContext:
    return SecretContext.of("cluster.credentials", owner, field)


@pytest.fixture
async def pool(isolated_database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(isolated_database_url, min_size=1, max_size=4)
    yield pool
    await pool.close()


async def table_dump(pool: asyncpg.Pool) -> str:
    """What a database dump of the table would show, as text."""
    rows = await pool.fetch("SELECT row_to_json(s)::text AS line FROM sealed_secrets AS s")
    return "\n".join(row["line"] for row in rows)


def plaintexts_in(leak_guard: LeakGuard, text: str) -> list[str]:
    """Test plaintexts found in ``text`` (a dump shows sealed values: that is expected)."""
    return [found for found in leak_guard.found_in(text) if found.startswith("a test plaintext")]


async def test_put_get_metadata_and_delete(pool: asyncpg.Pool, leak_guard: LeakGuard) -> None:
    store = EnvelopeSecretStore(KEY_A)
    owner = uuid.uuid4()
    first, second = leak_guard.plaintext("first"), leak_guard.plaintext("second")
    assert await get_secret(pool, store, context(owner)) is None
    assert await secret_metadata(pool, context(owner)) == SecretMetadata(False, None)

    written = await put_secret(pool, store, context(owner), first)
    assert written.is_set
    assert written.changed_at is not None
    value = await get_secret(pool, store, context(owner))
    assert isinstance(value, SecretValue)
    assert value.reveal() == first
    assert await secret_metadata(pool, context(owner)) == written

    await put_secret(pool, store, context(owner), SecretValue(second))
    assert (await get_secret(pool, store, context(owner))) == SecretValue(second)
    row = await pool.fetchrow("SELECT version, key_id, updated_at FROM sealed_secrets")
    assert row["version"] == 2
    assert row["key_id"] == MasterKey(KEY_A).key_id
    assert row["updated_at"] >= written.changed_at

    await put_secret(pool, store, context(owner, "password"), first)
    assert set(await secrets_metadata_of(pool, "cluster.credentials", str(owner))) == {
        "api_token",
        "password",
    }
    dump = await table_dump(pool)
    assert first not in dump
    assert second not in dump
    assert not plaintexts_in(leak_guard, dump)

    assert await delete_secret(pool, context(owner)) is True
    assert await delete_secret(pool, context(owner)) is False
    assert await delete_secrets_of(pool, "cluster.credentials", str(owner)) == 1
    assert await count_by_key_id(pool) == {}


async def test_a_sealed_value_copied_into_another_row_does_not_open(
    pool: asyncpg.Pool, leak_guard: LeakGuard
) -> None:
    store = EnvelopeSecretStore(KEY_A)
    victim, attacker = uuid.uuid4(), uuid.uuid4()
    await put_secret(pool, store, context(victim), leak_guard.plaintext("victim"))
    await put_secret(pool, store, context(attacker), leak_guard.plaintext("attacker"))
    await put_secret(pool, store, context(attacker, "password"), leak_guard.plaintext("pw"))
    await pool.execute(
        "UPDATE sealed_secrets SET sealed = (SELECT sealed FROM sealed_secrets WHERE owner_id = $1)"
        " WHERE owner_id = $2",
        str(victim),
        str(attacker),
    )
    for field in ("api_token", "password"):
        with pytest.raises(SecretDecryptionFailed):
            await get_secret(pool, store, context(attacker, field))
    assert await get_secret(pool, store, context(victim)) is not None


async def test_without_a_key_nothing_is_stored_and_a_wrong_key_opens_nothing(
    pool: asyncpg.Pool, leak_guard: LeakGuard
) -> None:
    owner = uuid.uuid4()
    with pytest.raises(SecretsUnavailable):
        await put_secret(pool, EnvelopeSecretStore(), context(owner), leak_guard.plaintext())
    assert await count_by_key_id(pool) == {}
    await put_secret(pool, EnvelopeSecretStore(KEY_A), context(owner), leak_guard.plaintext())
    with pytest.raises(SecretKeyUnknown):
        await get_secret(pool, EnvelopeSecretStore(KEY_B), context(owner))
    with pytest.raises(SecretsUnavailable):
        await get_secret(pool, EnvelopeSecretStore(), context(owner))


class ConcurrentWriter:
    """A database that lets the api store a new credential just before a re-wrap writes."""

    def __init__(self, pool: asyncpg.Pool, write: Callable[[], Any]) -> None:
        self.db = pool
        self.write = write

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        if query.lstrip().startswith("UPDATE sealed_secrets"):
            await self.write()
        return list(await self.db.fetch(query, *args))

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self.db.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.db.fetchval(query, *args)


async def test_rewrap_compares_and_sets_so_a_value_written_meanwhile_is_kept(
    pool: asyncpg.Pool, leak_guard: LeakGuard
) -> None:
    owners = [uuid.uuid4() for _ in range(3)]
    await put_secrets(
        pool, EnvelopeSecretStore(KEY_A), [(context(o), leak_guard.plaintext()) for o in owners]
    )
    rotating = EnvelopeSecretStore(KEY_B, KEY_A)
    fresh = leak_guard.plaintext("written-meanwhile")

    async def api_stores_a_new_token() -> None:
        await put_secret(pool, rotating, context(owners[1]), fresh)

    batch = await rewrap_batch(
        ConcurrentWriter(pool, api_stores_a_new_token), rotating, batch_size=10
    )
    assert (batch.examined, batch.rewrapped, batch.changed_meanwhile) == (3, 2, 1)
    assert await get_secret(pool, rotating, context(owners[1])) == SecretValue(fresh)
    assert await count_by_key_id(pool) == {MasterKey(KEY_B).key_id: 3}
    rows = await pool.fetch("SELECT owner_id, version, rewrapped_at FROM sealed_secrets")
    for row in rows:
        assert row["version"] == 2
        assert (row["rewrapped_at"] is None) == (row["owner_id"] == str(owners[1]))


async def test_rewrap_resumes_after_an_interruption_and_reports_what_it_cannot_open(
    pool: asyncpg.Pool, leak_guard: LeakGuard
) -> None:
    values = {uuid.uuid4(): leak_guard.plaintext() for _ in range(40)}
    await put_secrets(
        pool, EnvelopeSecretStore(KEY_A), [(context(o), v) for o, v in values.items()]
    )
    stray = uuid.uuid4()
    await put_secret(pool, EnvelopeSecretStore(os.urandom(32)), context(stray), "x")
    rotating = EnvelopeSecretStore(KEY_B, KEY_A)

    class Interrupted(Exception):
        pass

    def stop_after_two(batch: Any, totals: Any) -> None:
        if totals.batches == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        await rewrap_all(pool, rotating, batch_size=10, on_batch=stop_after_two)
    counts = await count_by_key_id(pool)
    done = counts[MasterKey(KEY_B).key_id]
    assert done in (19, 20)  # two batches of 10, less the stray value if it was among them
    assert counts[MasterKey(KEY_A).key_id] == 40 - done

    totals = await rewrap_all(pool, rotating, batch_size=10)
    assert [c.owner_id for c in totals.failed] == [str(stray)]
    counts = await count_by_key_id(pool)
    assert counts.get(MasterKey(KEY_A).key_id, 0) == 0
    assert counts[MasterKey(KEY_B).key_id] == 40
    after = EnvelopeSecretStore(KEY_B)
    for owner, plaintext in values.items():
        assert await get_secret(pool, after, context(owner)) == SecretValue(plaintext)


# -------------------------------------------------------------------------------- the API


class CredentialBody(Schema):
    """A request that carries a credential."""

    api_token = SecretInput(required=True)


class CredentialStatus(Schema):
    """A response that describes the credential."""

    api_token = fields.Nested(SecretStatusSchema, required=True)


class CredentialRoutes:
    """A plugin with one operation that stores a credential, as a feature would."""

    @hookimpl
    def deskpool_register_routes(self, routes: RouteTable) -> None:
        @routes.route(
            "PUT",
            "/api/v1/test-credentials/{owner}",
            summary="Store a test credential",
            tags=("test",),
            permission=None,
            body=CredentialBody,
            responses={200: ResponseSpec("The credential's status.", CredentialStatus)},
        )
        async def put_test_credential(call: Call) -> dict[str, SecretMetadata]:
            owner = call.path_param("owner")
            metadata = await put_secret(
                call.runtime.db, call.runtime.secret_store, context(owner), call.body["api_token"]
            )
            return {"api_token": metadata}


@pytest.fixture
async def api_for(
    make_config: Callable[..., Any], isolated_database_url: str, aiohttp_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    """``await api_for(**environ)``: a test client of the API on this test's database."""
    from deskpool.api.app import create_app

    opened: list[tuple[Runtime, Any]] = []

    async def make(**environ: str) -> Any:
        process = make_config(DATABASE_URL=isolated_database_url, **environ)
        process.plugins.pm.register(CredentialRoutes())
        runtime = Runtime(process.config, process.plugins)
        await runtime.open()
        client = await aiohttp_client(create_app(runtime))
        opened.append((runtime, client))
        return client

    yield make
    # Each client (and so its application, the authenticator's listener included) closes
    # before the runtime it uses; left to aiohttp_client's own teardown, the client would
    # close after the runtime, and that teardown hung under load.
    for runtime, client in opened:
        await client.close()
        await runtime.close()


async def test_storing_a_credential_without_a_key_is_a_503_problem(
    api_for: Callable[..., Any], leak_guard: LeakGuard
) -> None:
    client = await api_for()
    token = leak_guard.plaintext("api")
    response = await client.put("/api/v1/test-credentials/c1", json={"api_token": token})
    assert response.status == 503
    assert response.content_type == PROBLEM
    body = await response.text()
    assert token not in body
    problem = await response.json()
    assert problem["code"] == "secrets_key_missing"
    assert "SECRETS_MASTER_KEY" in problem["detail"]


async def test_a_credential_is_accepted_and_never_returned(
    api_for: Callable[..., Any], leak_guard: LeakGuard, isolated_database_url: str
) -> None:
    client = await api_for(SECRETS_MASTER_KEY=leak_guard.master_key())
    token = leak_guard.plaintext("api")
    response = await client.put("/api/v1/test-credentials/c1", json={"api_token": token})
    text = await response.text()
    assert response.status == 200, text
    assert token not in text
    body = await response.json()
    assert body["api_token"]["set"] is True
    assert body["api_token"]["changed_at"]
    assert set(body) == {"api_token"}

    too_long = leak_guard.plaintext("long") + "x" * 64 * 1024
    for bad in ("", 12, too_long):
        invalid = await client.put("/api/v1/test-credentials/c1", json={"api_token": bad})
        assert invalid.status == 422
        assert invalid.content_type == PROBLEM
        problem = await invalid.json()
        assert [error["pointer"] for error in problem["errors"]] == ["/api_token"], problem
        assert not plaintexts_in(leak_guard, json.dumps(problem))

    connection = await asyncpg.connect(isolated_database_url)
    try:
        dump = await table_dump(connection)
    finally:
        await connection.close()
    assert token not in dump
    assert not plaintexts_in(leak_guard, dump)


def test_the_openapi_document_marks_credentials_write_only() -> None:
    from apispec import APISpec
    from apispec.ext.marshmallow import MarshmallowPlugin

    spec = APISpec("t", "1", "3.1.0", plugins=[MarshmallowPlugin()])
    spec.components.schema("CredentialBody", schema=CredentialBody)
    spec.components.schema("CredentialStatus", schema=CredentialStatus)
    schemas = spec.to_dict()["components"]["schemas"]
    token = schemas["CredentialBody"]["properties"]["api_token"]
    assert token == {"type": "string", "format": "password", "writeOnly": True, "minLength": 1}
    assert set(schemas["SecretStatus"]["properties"]) == {"set", "changed_at"}
