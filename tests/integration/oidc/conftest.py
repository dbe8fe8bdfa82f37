"""Fixtures of the oidc auth provider tests: the test issuer, a clock the tests move, verifiers.

Every unacceptable token must end in :class:`Unauthenticated` (401), never in another
exception; an issuer that cannot be reached must end in :class:`ServiceUnavailable` (503).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.support.oidc import (
    AUDIENCE,
    ManualClock,
)

from deskpool.auth import AuthProviderState
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider, OidcSettings


@pytest.fixture
async def idp() -> AsyncIterator[TestIdentityProvider]:
    async with TestIdentityProvider(audience=AUDIENCE) as provider:
        yield provider


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def make_verifier(clock: ManualClock) -> AsyncIterator[Callable[..., OidcAuthProvider]]:
    """``make_verifier(issuer_url, **settings)``: a provider on the manual clock, closed after."""
    made: list[OidcAuthProvider] = []

    def make(issuer_url: str, **settings: Any) -> OidcAuthProvider:
        options: dict[str, Any] = {"retry_initial": 0.01, "retry_max": 0.05, **settings}
        audience = options.pop("audience", AUDIENCE)
        verifier = OidcAuthProvider(
            OidcSettings(issuer_url=issuer_url, audience=audience, **options),
            now=clock.now,
            monotonic=clock.monotonic,
        )
        made.append(verifier)
        return verifier

    yield make
    for verifier in made:
        await verifier.close()


@pytest.fixture
async def verifier(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> AsyncIterator[OidcAuthProvider]:
    provider = make_verifier(idp.issuer_url)
    await provider.start()
    assert provider.state is AuthProviderState.READY
    yield provider
    await provider.close()
