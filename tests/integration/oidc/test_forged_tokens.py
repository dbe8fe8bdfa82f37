"""Forged tokens (alg none, HS256 with the public key, embedded or remote keys) are refused."""

from __future__ import annotations

import json

import pytest
from joserfc import jws
from tests.support.oidc import (
    rejected,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


async def test_alg_none_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.forge_alg_none())
    assert "algorithm" in error.detail
    assert idp.jwks_requests == 1


async def test_hs256_signed_with_the_public_key_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.forge_hs256_with_public_key())
    assert "algorithm" in error.detail


@pytest.mark.parametrize("impersonate", [False, True])
async def test_an_embedded_jwk_header_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, impersonate: bool
) -> None:
    kid = idp.current_kid if impersonate else None
    await rejected(verifier, idp.forge_embedded_jwk(kid=kid))
    assert idp.jwks_requests == 1


async def test_a_jku_header_is_unauthenticated_and_never_followed(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    await rejected(verifier, idp.forge_jku())
    assert idp.untrusted_jwks_requests == 0
    assert idp.jwks_requests == 1


async def test_an_x5u_header_is_unauthenticated_and_never_followed(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    await rejected(verifier, idp.forge_x5u())
    assert idp.untrusted_jwks_requests == 0


async def test_a_key_of_the_wrong_type_for_the_algorithm_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    es_kid = next(k.kid for k in idp.keys if k.alg == "ES256")
    rs_key = idp.key(idp.current_kid)
    # Signed by the RSA key but naming the EC key: the EC key cannot verify RS256.
    token = jws.serialize_compact(
        {"alg": "RS256", "kid": es_kid},
        json.dumps(idp.token_claims()).encode(),
        rs_key.key,
        algorithms=["RS256"],
    )
    await rejected(verifier, token)


async def test_crit_and_b64_headers_are_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    token = idp.issue_token(headers={"b64": False, "crit": ["b64"]})
    await rejected(verifier, token)
