"""Revocation is composed where a process is put together (deskpool.identity.access).

The test plugin composes it for every test, so each test here empties the seam first and shows
that the composition root itself fills it in: were it not, a change of access in a real ``api``
process would fail, and a gateway could redeem no token.
"""

from __future__ import annotations

from typing import Any

import pytest

from deskpool.api.app import create_app
from deskpool.identity import access
from deskpool.revocation import service as revocation
from deskpool_gateway import broker_factory_of_platform


@pytest.fixture
def empty_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "_revoker", None)


@pytest.mark.usefixtures("empty_seam")
async def test_an_empty_seam_refuses_rather_than_let_access_go_on() -> None:
    with pytest.raises(RuntimeError, match="revocation is not composed"):
        access.revoker()
    with pytest.raises(RuntimeError, match="revocation is not composed"):
        await access.users_with_claim(None, "claim")  # type: ignore[arg-type]


@pytest.mark.usefixtures("empty_seam")
async def test_the_api_application_composes_revocation(runtime: Any) -> None:
    create_app(runtime)
    assert access.revoker() is revocation


@pytest.mark.usefixtures("empty_seam")
async def test_the_gateway_broker_composes_revocation(runtime: Any) -> None:
    broker_factory_of_platform(runtime)
    assert access.revoker() is revocation
