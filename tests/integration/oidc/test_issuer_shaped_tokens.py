"""Tokens shaped like real issuers' access and ID tokens."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from joserfc import jws
from tests.support.oidc import (
    AUDIENCE,
    rejected,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider

#: The JOSE header ``typ`` and the claims (beyond iss, sub, aud, iat, exp, jti) of each issuer's
#: tokens, after the issuers' documentation and tokens they issued (see
#: ``deskpool_oidc.token_types``). ``aud`` is the API audience for both: the set-up of issue 21,
#: where ``AUTH_OIDC_AUDIENCE`` is the console's client id.
ACCESS_TOKENS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "keycloak": (
        "JWT",
        {
            "typ": "Bearer",
            "azp": "deskpool-console",
            "scope": "openid profile email",
            "sid": "5b8a0f2e-6d1c-4a0b-9f0e-1c2d3e4f5a6b",
            "realm_access": {"roles": ["default-roles-corp"]},
            "preferred_username": "alice",
        },
    ),
    "entra-delegated": (
        "JWT",
        {
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "0",
            "scp": "access_as_user",
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
            "uti": "fqiBqXLPj0eQa82S-IYFAA",
            "rh": "I",
        },
    ),
    "entra-application": (
        "JWT",
        {
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "1",
            "roles": ["Deskpool.Operate"],
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
        },
    ),
    "okta": (
        None,
        {
            "ver": 1,
            "cid": "0oa1b2c3d4e5f6g7h8i9",
            "uid": "00u1b2c3d4e5f6g7h8i9",
            "scp": ["openid", "profile", "email", "groups"],
            "auth_time": 1688145909,
        },
    ),
    "auth0": (
        "JWT",
        {
            "azp": "K1AUPhZq8mRi0Q0pjhkfu1D7y6KjDQja",
            "scope": "openid profile email",
            "permissions": [],
        },
    ),
    "auth0-rfc9068": (
        "at+jwt",
        {"client_id": "K1AUPhZq8mRi0Q0pjhkfu1D7y6KjDQja", "scope": "openid profile email"},
    ),
    "oidc-provider": (
        "at+jwt",
        {"client_id": "deskpool-console", "scope": "openid email"},
    ),
}

ID_TOKENS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "keycloak": (
        "JWT",
        {
            "typ": "ID",
            "azp": "deskpool",
            "sid": "5b8a0f2e-6d1c-4a0b-9f0e-1c2d3e4f5a6b",
            "auth_time": 1688145909,
            "at_hash": "Ghv0Ahz_nyw1JxnFJbfvFg",
            "preferred_username": "alice",
        },
    ),
    "keycloak-no-hash": (
        "JWT",
        {"typ": "ID", "azp": "deskpool", "preferred_username": "alice"},
    ),
    "entra": (
        "JWT",
        {
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
            "uti": "fqiBqXLPj0eQa82S-IYFAA",
            "rh": "I",
            "preferred_username": "alice@example.com",
            "name": "Alice",
        },
    ),
    "entra-nonce": (
        "JWT",
        {"oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474", "ver": "2.0", "nonce": "n-8x3"},
    ),
    "okta": (
        None,
        {
            "ver": 1,
            "amr": ["pwd"],
            "idp": "00o1b2c3d4e5f6g7h8i9",
            "auth_time": 1688145909,
            "at_hash": "fPlsvVszI29LU2UhDyJ9vg",
            "preferred_username": "alice@example.com",
        },
    ),
    "okta-no-hash": (
        None,
        {"ver": 1, "amr": ["pwd"], "idp": "00o1b2c3d4e5f6g7h8i9", "auth_time": 1688145909},
    ),
    "auth0": (
        "JWT",
        {
            "name": "Jane Doe",
            "nickname": "jane",
            "picture": "https://example.com/jane.png",
            "email": "jane@example.com",
            "email_verified": True,
            "sid": "Ud2YEuWs3tV1ZCF8wplyX0nZTvE0vl9i",
        },
    ),
    "oidc-provider": (
        None,
        {"auth_time": 1688145909, "sid": "kWmB3v2oUuK5M6gSxS0Qy"},
    ),
    "oidc-provider-hashes": (
        None,
        {"at_hash": "x3eHBBAWOxDjAqDZZ8tQLw", "nonce": "n-1", "auth_time": 1688145909},
    ),
}


def shaped(idp: TestIdentityProvider, typ: str | None, claims: dict[str, Any]) -> str:
    """A token signed by the test issuer with the header ``typ`` (or none) and ``claims``."""
    body = idp.token_claims("alice", **claims)
    header = {"alg": "RS256", "kid": idp.current_kid} | ({"typ": typ} if typ else {})
    key = idp.key(idp.current_kid)
    return jws.serialize_compact(header, json.dumps(body).encode(), key.key, algorithms=["RS256"])


@pytest.mark.parametrize("issuer", sorted(ACCESS_TOKENS))
async def test_access_tokens_shaped_like_each_issuers_are_accepted(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, issuer: str
) -> None:
    token = shaped(idp, *ACCESS_TOKENS[issuer])
    assert (await verifier.verify(token)).subject == "alice"


@pytest.mark.parametrize("issuer", sorted(ID_TOKENS))
async def test_id_tokens_shaped_like_each_issuers_are_refused(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, issuer: str
) -> None:
    error = await rejected(verifier, shaped(idp, *ID_TOKENS[issuer]))
    assert "access token" in error.detail
    assert 'error="invalid_token"' in error.headers["WWW-Authenticate"]


async def test_a_code_flow_id_token_without_nonce_or_at_hash_is_refused(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    """The token issue 21 found accepted: ``typ: JWT``, no ``nonce``, no ``at_hash``."""
    error = await rejected(verifier, shaped(idp, "JWT", {"azp": AUDIENCE, "email": "a@b.c"}))
    assert "not typed at+jwt" in error.detail
    for claim in ("scope", "scp", "client_id", "roles"):
        token = shaped(idp, "JWT", {"azp": AUDIENCE, claim: "x"})
        assert (await verifier.verify(token)).subject == "alice", claim
    for typ in ("at+jwt", "application/at+jwt"):
        assert (await verifier.verify(shaped(idp, typ, {}))).subject == "alice", typ


@pytest.mark.parametrize("issuer", sorted(ID_TOKENS))
async def test_each_issuers_id_tokens_pass_when_the_operator_accepts_id_tokens(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider], issuer: str
) -> None:
    verifier = make_verifier(idp.issuer_url, accept_id_tokens=True)
    await verifier.start()
    assert (await verifier.verify(shaped(idp, *ID_TOKENS[issuer]))).subject == "alice"
