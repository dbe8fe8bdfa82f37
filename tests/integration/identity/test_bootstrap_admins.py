"""Bootstrap admins: who becomes ``platform_admin`` at first sign-in, and who never does."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from deskpool.testing.pytest_plugin import served

TAG = uuid.uuid4().hex[:8]
ROOT_EMAIL = f"Root-{TAG}@Example.COM"
ROOT_SUBJECT = f"Root-Subject-{TAG}"


@pytest.fixture
async def client(secure_environ: dict[str, str], aiohttp_client: Any) -> AsyncIterator[Any]:
    environ = {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": ", ".join(
            ["someone-else@example.com", ROOT_EMAIL, *map(case_email, VERIFIED_CLAIMS)]
        ),
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ROOT_SUBJECT,
    }
    async with served(environ, aiohttp_client) as (_, client):
        yield client


async def is_admin(client: Any, headers: dict[str, str]) -> bool:
    response = await client.get("/api/v1/me", headers=headers)
    assert response.status == 200, await response.text()
    return bool((await response.json())["is_platform_admin"])


def unique(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


#: ``email_verified`` values, each tried by the first account with an address of its own.
VERIFIED_CLAIMS: dict[str, Any] = {
    "missing": None,
    "false": False,
    "zero": 0,
    "one": 1,
    "string-true": "true",
    "string-True": "True",
    "string-1": "1",
    "yes": "yes",
    "true": True,
}


def case_email(case: str) -> str:
    return f"Verify-{case}-{TAG}@Example.com"


@pytest.mark.parametrize("case", VERIFIED_CLAIMS)
async def test_an_email_counts_only_when_email_verified_is_exactly_true(
    client: Any, bearer: Any, case: str
) -> None:
    claims: dict[str, Any] = {"email": case_email(case).lower()}
    if VERIFIED_CLAIMS[case] is not None:
        claims["email_verified"] = VERIFIED_CLAIMS[case]
    assert await is_admin(client, bearer(unique("claimant"), **claims)) is (case == "true")


async def test_a_verified_bootstrap_email_at_first_sign_in_compared_case_insensitively(
    client: Any, bearer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first = bearer(unique("first"), email=ROOT_EMAIL.upper(), email_verified=True)
    assert await is_admin(client, first)

    # A second account with the same email never becomes admin; a warning says why.
    with caplog.at_level(logging.WARNING, logger="deskpool.identity.sign_in"):
        second = bearer(unique("second"), email=ROOT_EMAIL.lower(), email_verified=True)
        assert not await is_admin(client, second)
    assert any("another account" in record.getMessage() for record in caplog.records)


async def test_the_role_is_given_at_the_first_sign_in_only(
    secure_environ: dict[str, str], aiohttp_client: Any, bearer: Any
) -> None:
    email = unique("late") + "@example.com"
    subject = unique("late")
    # The user signs in once without the address the operator later lists...
    async with served(secure_environ, aiohttp_client) as (_, client):
        assert not await is_admin(client, bearer(subject, email=email, email_verified=True))
    # ...and its next sign-ins, with the address now listed, do not make it admin.
    environ = {
        **secure_environ,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": email,
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": subject,
    }
    async with served(environ, aiohttp_client) as (_, client):
        assert not await is_admin(client, bearer(subject, email=email, email_verified=True))


async def test_subjects_match_exactly(client: Any, bearer: Any) -> None:
    assert not await is_admin(client, bearer(ROOT_SUBJECT.lower()))
    assert not await is_admin(client, bearer(ROOT_SUBJECT + " "))
    assert await is_admin(client, bearer(ROOT_SUBJECT))
