"""Tokens the oidc auth provider accepts, and its cache of verified tokens."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import pytest
from tests.support.oidc import (
    AUDIENCE,
    ManualClock,
    rejected,
)

from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"])
async def test_a_valid_token_is_accepted(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider], alg: str
) -> None:
    if alg not in {"RS256", "ES256"}:
        idp.add_key(alg)
    verifier = make_verifier(idp.issuer_url, groups_claim="realm_access.groups")
    await verifier.start()
    try:
        token = idp.issue_token(
            "ada",
            alg=alg,
            email="ada@example.com",
            email_verified=True,
            name="Ada",
            realm_access={"groups": ["admins", "ops"]},
            roles=["operator"],
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            identity = await verifier.verify(token)
    finally:
        await verifier.close()
    assert identity.issuer == idp.issuer_url
    assert identity.subject == "ada"
    assert identity.audience == (AUDIENCE,)
    assert identity.email == "ada@example.com"
    assert identity.email_verified
    assert identity.groups == ("admins", "ops")
    assert identity.roles == ("operator",)


async def test_a_verified_token_is_served_from_the_cache(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    token = idp.issue_token("ada")
    first = await verifier.verify(token)
    second = await verifier.verify(token)
    assert first is second
    assert verifier.stats.verified == 1
    assert verifier.stats.cache_hits == 1


async def test_a_cached_token_expires_with_the_token(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, clock: ManualClock
) -> None:
    token = idp.issue_token("ada", expires_in=120)
    await verifier.verify(token)
    clock.advance(120 + 61)
    error = await rejected(verifier, token)
    assert "expired" in error.detail


async def test_an_audience_list_containing_ours_is_accepted(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    identity = await verifier.verify(idp.issue_token(audience=["account", AUDIENCE]))
    assert identity.audience == ("account", AUDIENCE)


async def test_an_issuer_below_a_path_is_supported(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    async with TestIdentityProvider(issuer_path="/realms/deskpool", audience=AUDIENCE) as idp:
        assert idp.issuer_url.endswith("/realms/deskpool")
        verifier = make_verifier(idp.issuer_url + "/")  # a trailing slash is tolerated
        await verifier.start()
        try:
            identity = await verifier.verify(idp.issue_token("ada"))
        finally:
            await verifier.close()
    assert identity.issuer == idp.issuer_url


@pytest.mark.parametrize("skew", [-30, 30])
async def test_clock_skew_under_a_minute_is_tolerated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, skew: int
) -> None:
    now = time.time()
    if skew < 0:
        token = idp.issue_token(expires_in=skew)  # expired 30 s ago
    else:
        token = idp.issue_token(not_before=now + skew, issued_at=now + skew)
    assert (await verifier.verify(token)).subject == "alice"
