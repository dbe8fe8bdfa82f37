"""No token, or one that is not a well-formed signed JWT, is unauthenticated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.support.oidc import (
    AUDIENCE,
    b64,
    rejected,
    signed_payload,
)

from deskpool.auth import bearer_token_from_header
from deskpool.errors import Unauthenticated
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


async def test_no_token(verifier: OidcAuthProvider) -> None:
    with pytest.raises(Unauthenticated) as caught:
        bearer_token_from_header(None)
    assert "error=" not in caught.value.headers["WWW-Authenticate"]
    await rejected(verifier, "")


def malformed_tokens() -> list[str]:
    payload = b64(b'{"sub":"alice"}')
    sig = b64(b"sig")

    def with_header(header: bytes) -> str:
        return f"{b64(header)}.{payload}.{sig}"

    good_header = b'{"alg":"RS256","kid":"k"}'
    return [
        "not-a-jwt",
        "a.b",
        "a.b.c",
        "....",
        "a.b.c.d.e",
        f"{b64(good_header)}.{payload}",
        f"{b64(good_header)}.{payload}.",
        f"{b64(good_header)}.{payload}.!!!",
        f"{b64(good_header)}.@@@.{sig}",
        with_header(b"not json"),
        with_header(b'["alg"]'),
        with_header(b'{"alg":["RS256"]}'),
        with_header(b'{"alg":null}'),
        with_header(b'{"kid":"k"}'),
        with_header(b'{"alg":"RS256","kid":7}'),
        with_header(b'{"alg":"RS256","kid":"k"}'),
        with_header(json.dumps({"alg": "RS256", "kid": "k" * 2000}).encode()),
        with_header(b"[" * 300 + b"]" * 300),
        "\u00e9.\u00e9.\u00e9",
        "\udcff.a.b",
        "a" * 200_000,
    ]


@pytest.mark.parametrize("token", malformed_tokens())
async def test_a_malformed_token_is_unauthenticated(verifier: OidcAuthProvider, token: str) -> None:
    await rejected(verifier, token)


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"{}",
        json.dumps({"iss": "x", "sub": "a", "aud": "deskpool"}).encode(),
    ],
)
async def test_a_signed_token_with_an_unusable_payload_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, payload: bytes
) -> None:
    await rejected(verifier, signed_payload(idp, payload))


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": "tomorrow"},
        {"exp": 10**400},
        {"exp": True},
        {"nbf": "now"},
        {"iat": [1]},
        {"sub": ""},
        {"sub": 42},
        {"iss": None},
        {"aud": [AUDIENCE, 3]},
        {"aud": {"x": AUDIENCE}},
    ],
)
async def test_a_signed_token_with_invalid_claim_types_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, claims: dict[str, Any]
) -> None:
    body = idp.token_claims("alice")
    body.update(claims)
    await rejected(verifier, signed_payload(idp, json.dumps(body).encode()))


@pytest.mark.parametrize("claim", ["iss", "sub", "aud", "exp"])
async def test_a_token_without_a_required_claim_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, claim: str
) -> None:
    body = idp.token_claims("alice")
    del body[claim]
    error = await rejected(verifier, signed_payload(idp, json.dumps(body).encode()))
    assert claim in error.detail


async def test_a_tampered_payload_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    header, _, signature = idp.issue_token("alice").split(".")
    forged = b64(json.dumps(idp.token_claims("mallory")).encode())
    error = await rejected(verifier, f"{header}.{forged}.{signature}")
    assert "signature" in error.detail
