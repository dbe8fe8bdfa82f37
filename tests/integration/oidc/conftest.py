"""Fixtures of the oidc auth provider tests: the test issuer, a clock the tests move, verifiers.

Every unacceptable token must end in :class:`Unauthenticated` (401), never in another
exception; an issuer that cannot be reached must end in :class:`ServiceUnavailable` (503).
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from joserfc import jws

from deskpool.auth import AuthProviderState
from deskpool.errors import Unauthenticated
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider, OidcSettings

AUDIENCE = "deskpool"


class ManualClock:
    """Wall-clock and monotonic time that move only when a test says so."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._start = time.monotonic()

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return self._start + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


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


async def rejected(verifier: OidcAuthProvider, token: str) -> Unauthenticated:
    """Verify ``token`` and return the Unauthenticated it must raise (anything else fails)."""
    with pytest.raises(Unauthenticated) as caught:
        await verifier.verify(token)
    error = caught.value
    assert error.status == 401
    assert error.headers["WWW-Authenticate"].startswith('Bearer realm="deskpool"')
    return error


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed_payload(idp: TestIdentityProvider, payload: bytes) -> str:
    """A correctly signed JWS whose payload is whatever the test wants."""
    key = idp.key(idp.current_kid)
    return jws.serialize_compact(
        {"alg": key.alg, "kid": key.kid}, payload, key.key, algorithms=[key.alg]
    )
