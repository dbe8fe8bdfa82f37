"""Identity and access through the real API: tokens, the permission matrix, bootstrap admins."""

from __future__ import annotations

import base64
import re
import secrets
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.seed import seed_user

from deskpool.api.app import build_route_table
from deskpool.api.routes import Operation
from deskpool.testing.pytest_plugin import served

PROBLEM = "application/problem+json"
#: The bootstrap email of this run: an address makes one admin, the first account to have it,
#: and other tests of the run's database sign in with addresses of their own.
ROOT_EMAIL = f"Root-{uuid.uuid4().hex[:8]}@Example.COM"
Bearer = Callable[..., dict[str, str]]


def operations(runtime: Any) -> list[Operation]:
    return [op for op in build_route_table(runtime.plugins).operations() if not op.public]


def concrete_path(operation: Operation) -> str:
    return re.sub(r"{[^}]+}", lambda _: str(uuid.uuid4()), operation.path)


async def call(client: Any, operation: Operation, headers: dict[str, str]) -> Any:
    kwargs: dict[str, Any] = {"headers": headers}
    if operation.body is not None:
        kwargs["json"] = {}
    return await client.request(operation.method, concrete_path(operation), **kwargs)


async def test_token_problems_are_401_problem_json(
    secure_api_client: Any, identity_provider: Any
) -> None:
    idp = identity_provider
    bad_tokens = {
        "malformed": "not a token at all",
        "expired": idp.issue_token("alice", expires_in=-3600),
        "not_yet_valid": idp.issue_token("alice", not_before=4102444800),
        "wrong_issuer": idp.issue_token("alice", issuer="https://evil.example"),
        "wrong_audience": idp.issue_token("alice", audience="someone-else"),
        "alg_none": idp.forge_alg_none("alice"),
        "hs256_confusion": idp.forge_hs256_with_public_key("alice"),
        "jwk_header": idp.forge_embedded_jwk("alice"),
        "unknown_kid": idp.forge_unknown_kid("alice"),
    }
    no_token = await secure_api_client.get("/api/v1/me")
    assert no_token.status == 401
    assert no_token.content_type == PROBLEM
    assert no_token.headers["WWW-Authenticate"].startswith("Bearer")
    for name, token in bad_tokens.items():
        response = await secure_api_client.get(
            "/api/v1/me", headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status == 401, name
        assert response.content_type == PROBLEM, name
        assert "invalid" in response.headers["WWW-Authenticate"], name


@pytest.fixture
async def matrix_api(secure_environ: dict[str, str], aiohttp_client: Any) -> Any:
    """The API with every component configured, so that configuration is never the answer."""
    environ = {
        **secure_environ,
        "GATEWAY_PUBLIC_WS_URL": "wss://gateway.test/websocket-tunnel",
        "SECRETS_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
    }
    async with served(environ, aiohttp_client) as served_api:
        yield served_api


async def test_permission_matrix(
    matrix_api: tuple[Any, Any], identity_provider: Any, bearer: Bearer
) -> None:
    secure_runtime, secure_api_client = matrix_api
    ops = operations(secure_runtime)
    assert len(ops) > 20
    issuer = identity_provider.issuer_url
    permissions = sorted({op.permission for op in ops if op.permission})
    await seed_user(secure_runtime, issuer, "nobody")
    await seed_user(secure_runtime, issuer, "admin", "platform:admin")
    for permission in permissions:
        await seed_user(secure_runtime, issuer, f"holder-{permission}", permission)
    for operation in ops:
        label = f"{operation.method} {operation.path}"
        anonymous = await call(secure_api_client, operation, {})
        assert anonymous.status == 401, label
        without = await call(secure_api_client, operation, bearer("nobody"))
        if operation.permission is None or operation.entitlement:
            assert without.status not in (401, 403), label
        else:
            assert without.status == 403, label
            assert without.content_type == PROBLEM
            holder = await call(
                secure_api_client, operation, bearer(f"holder-{operation.permission}")
            )
            assert holder.status not in (401, 403), f"{label}: {await holder.text()}"
        admin = await call(secure_api_client, operation, bearer("admin"))
        assert admin.status not in (401, 403), label
        assert admin.status < 500, f"{label}: {await admin.text()}"


@pytest.fixture
def bootstrap_environ(secure_environ: dict[str, str]) -> dict[str, str]:
    return {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": ROOT_EMAIL,
        "AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS": "vdi-operators=operators",
    }


@pytest.fixture
async def bootstrap_client(bootstrap_environ: dict[str, str], aiohttp_client: Any) -> Any:
    async with served(bootstrap_environ, aiohttp_client) as (_, client):
        yield client


async def test_bootstrap_admin_manages_groups_and_grants_at_first_sign_in(
    bootstrap_client: Any, bearer: Bearer
) -> None:
    admin = bearer("root-subject", email=ROOT_EMAIL.lower(), email_verified=True)
    me = await bootstrap_client.get("/api/v1/me", headers=admin)
    assert me.status == 200
    body = await me.json()
    assert body["is_platform_admin"]
    assert "platform_admin" in body["roles"]

    # The bootstrap binding created the local group; give it the operator role.
    groups = await (await bootstrap_client.get("/api/v1/groups", headers=admin)).json()
    operators = next(g for g in groups["items"] if g["key"] == "operators")
    grant = await bootstrap_client.post(
        "/api/v1/grants",
        headers=admin,
        json={"subject_type": "group", "subject_id": operators["id"], "role_key": "operator"},
    )
    assert grant.status == 201, await grant.text()

    # A user whose token carries the bound claim value holds the group's role.
    member = bearer("bob", email="bob@example.com", groups=["vdi-operators"])
    bob = await (await bootstrap_client.get("/api/v1/me", headers=member)).json()
    assert [g["key"] for g in bob["groups"]] == ["operators"]
    assert "pools:manage" in bob["permissions"]
    assert (await bootstrap_client.get("/api/v1/pools", headers=member)).status == 200
    assert (await bootstrap_client.get("/api/v1/grants", headers=member)).status == 200
    assert (
        await bootstrap_client.post(
            "/api/v1/groups", headers=member, json={"key": "x", "name": "x"}
        )
    ).status == 403

    # Every step is in the audit trail.
    events = await (
        await bootstrap_client.get("/api/v1/audit-events?limit=100", headers=admin)
    ).json()
    actions = [event["action"] for event in events["items"]]
    for action in ("user.create", "grant.create", "oidc_group_binding.create", "auth.denied"):
        assert action in actions


async def test_unverified_email_is_not_a_bootstrap_admin(
    bootstrap_client: Any, bearer: Bearer
) -> None:
    headers = bearer("mallory", email=ROOT_EMAIL.lower(), email_verified=False)
    body = await (await bootstrap_client.get("/api/v1/me", headers=headers)).json()
    assert not body["is_platform_admin"]
    assert (await bootstrap_client.get("/api/v1/groups", headers=headers)).status == 403


async def test_a_flood_of_bad_tokens_is_rate_limited_before_it_is_recorded(
    secure_environ: dict[str, str], aiohttp_client: Any, frozen_rate_limit_clock: float
) -> None:
    environ = {**secure_environ, "API_RATE_LIMIT_PER_MINUTE": "3"}
    async with served(environ, aiohttp_client) as (runtime, client):
        prefix = f"flood-{uuid.uuid4().hex}"
        statuses = []
        for number in range(6):
            headers = {
                "Authorization": "Bearer not-a-real-token",
                "X-Request-Id": f"{prefix}-{number}",
            }
            statuses.append((await client.get("/api/v1/me", headers=headers)).status)
        assert statuses == [401, 401, 401, 429, 429, 429]
        recorded = await runtime.db.fetchval(
            "SELECT count(*) FROM audit_events WHERE action = 'auth.denied' AND request_id LIKE $1",
            f"{prefix}-%",
        )
        assert recorded == 3


async def test_authentication_outcomes_and_cache_hits_are_in_the_metrics(
    secure_api_client: Any, secure_runtime: Any, bearer: Bearer
) -> None:
    def sample(name: str, labels: dict[str, str]) -> float:
        return secure_runtime.metrics.get_sample_value(name, labels) or 0.0

    headers = bearer(f"metrics-{uuid.uuid4().hex}")
    for _ in range(3):
        assert (await secure_api_client.get("/api/v1/me", headers=headers)).status == 200
    refused = {"Authorization": "Bearer not-a-token"}
    assert (await secure_api_client.get("/api/v1/me", headers=refused)).status == 401
    assert sample("deskpool_auth_requests_total", {"outcome": "authenticated"}) == 3
    assert sample("deskpool_auth_requests_total", {"outcome": "unauthenticated"}) == 1
    assert sample("deskpool_auth_principal_cache_total", {"result": "miss"}) == 1
    assert sample("deskpool_auth_principal_cache_total", {"result": "hit"}) == 2
