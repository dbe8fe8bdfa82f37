"""The OIDC verifier tests' helpers: a manual clock, token pieces, the refusal check."""

from __future__ import annotations

import base64
import time

import pytest
from joserfc import jws

from deskpool.errors import Unauthenticated
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider

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
