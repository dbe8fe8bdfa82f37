"""Expiry, not-before, issued-at, issuer and audience decide whether a token is accepted."""

from __future__ import annotations

import time

import pytest
from tests.support.oidc import (
    rejected,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


async def test_an_expired_token_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.issue_token(expires_in=-120))
    assert "expired" in error.detail
    assert 'error="invalid_token"' in error.headers["WWW-Authenticate"]


async def test_a_token_not_yet_valid_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.issue_token(not_before=time.time() + 600))
    assert "not valid yet" in error.detail


async def test_a_token_issued_in_the_future_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    await rejected(verifier, idp.issue_token(issued_at=time.time() + 600))


async def test_a_token_of_another_issuer_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.issue_token(issuer="https://evil.example.com"))
    assert "issuer" in error.detail


@pytest.mark.parametrize("audience", ["another-client", ["another-client", "account"], []])
async def test_a_token_for_another_audience_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, audience: str | list[str]
) -> None:
    await rejected(verifier, idp.issue_token(audience=audience))
