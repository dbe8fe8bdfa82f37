"""The issuer's signing keys: refreshes on unknown kids, rotation, unusable keys."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.support.oidc import (
    ManualClock,
    b64,
    rejected,
)

from deskpool.errors import Unauthenticated
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


async def test_an_unknown_kid_refreshes_the_jwks_once_per_cooldown(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, clock: ManualClock
) -> None:
    assert idp.jwks_requests == 1
    error = await rejected(verifier, idp.forge_unknown_kid())
    assert "unknown key" in error.detail
    assert idp.jwks_requests == 2
    await rejected(verifier, idp.forge_unknown_kid())
    assert idp.jwks_requests == 2  # inside the cooldown: no refetch
    clock.advance(61)
    await rejected(verifier, idp.forge_unknown_kid())
    assert idp.jwks_requests == 3


async def test_concurrent_unknown_kids_cause_one_refresh(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    tokens = [idp.forge_unknown_kid() for _ in range(20)]
    results = await asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True)
    assert all(isinstance(result, Unauthenticated) for result in results)
    assert idp.jwks_requests == 2


async def test_a_rotated_key_is_accepted_after_a_refresh(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    old_kid = idp.current_kid
    old_token = idp.issue_token("ada")
    assert (await verifier.verify(old_token)).subject == "ada"
    new_kid = idp.rotate()
    identity = await verifier.verify(idp.issue_token("ada"))
    assert identity.subject == "ada"
    assert idp.jwks_requests == 2
    assert new_kid in verifier.key_ids
    assert old_kid not in verifier.key_ids
    # The withdrawn key is no longer trusted, even for a token verified (and cached) before.
    error = await rejected(verifier, old_token)
    assert "unknown key" in error.detail


async def test_a_key_published_inside_the_cooldown_is_accepted_after_it(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, clock: ManualClock
) -> None:
    await rejected(verifier, idp.forge_unknown_kid())  # spends the refresh
    new_kid = idp.add_key("ES256", publish=False)
    token = idp.issue_token(kid=new_kid)
    await rejected(verifier, token)  # not published yet
    idp.publish_key(new_kid)
    await rejected(verifier, token)  # published, but inside the cooldown
    assert idp.jwks_requests == 2
    clock.advance(61)
    assert (await verifier.verify(token)).subject == "alice"
    assert idp.jwks_requests == 3


async def test_an_old_jwks_is_refreshed_in_the_background(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, clock: ManualClock
) -> None:
    clock.advance(3601)
    retired = idp.current_kid
    idp.add_key("RS256", make_current=False)
    await verifier.verify(idp.issue_token("ada", kid=retired, expires_in=7200))
    task = verifier._refresh_task
    assert task is not None
    await task
    assert idp.jwks_requests == 2
    assert len(verifier.key_ids) == 3


async def test_unusable_keys_of_the_jwks_are_ignored(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    class JunkKeysIdentityProvider(TestIdentityProvider):
        def jwks(self) -> dict[str, Any]:
            keys = super().jwks()["keys"]
            keys += [
                {"kty": "oct", "kid": "hmac", "k": b64(b"secret" * 8)},
                {**keys[0], "kid": "for-encryption", "use": "enc"},
                {**keys[0], "kid": "for-hmac", "alg": "HS256"},
                {"kty": "RSA", "kid": "broken", "n": "AQAB"},
                {"kty": "EC", "crv": "P-256", "x": "bad", "y": "bad"},
                "not an object",
            ]
            return {"keys": keys}

    async with JunkKeysIdentityProvider() as idp:
        verifier = make_verifier(idp.issuer_url)
        await verifier.start()
        try:
            assert verifier.key_ids == {k.kid for k in idp.keys}
            hs = idp.forge_hs256_with_public_key()
            await rejected(verifier, hs)
        finally:
            await verifier.close()
