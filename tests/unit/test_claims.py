"""Reading identities from verified claims, and bearer credentials from headers (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from deskpool.auth import (
    AuthProvider,
    AuthProviderState,
    VerifiedToken,
    bearer_token_from_header,
    claim_at_path,
)
from deskpool.errors import Unauthenticated

# --------------------------------------------------------------------------- claim_at_path

KEYCLOAK: dict[str, Any] = {
    "sub": "f3a1",
    "groups": ["/admins", "/desk/ops"],
    "realm_access": {"roles": ["operator", "offline_access"]},
    "resource_access": {"deskpool": {"roles": ["auditor"]}},
    "https://example.com/groups": ["namespaced"],
    "single": "only-one",
    "mixed": ["a", 1, None, "", "  ", "b", "a", {"x": 1}, True],
    "urn:zitadel:iam:org:project:roles": {"admin": {"123": "org"}, "viewer": {}},
    "number": 7,
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("groups", ("/admins", "/desk/ops")),
        ("realm_access.roles", ("operator", "offline_access")),
        ("resource_access.deskpool.roles", ("auditor",)),
        ("https://example.com/groups", ("namespaced",)),
        ("single", ("only-one",)),
        ("mixed", ("a", "b")),
        ("urn:zitadel:iam:org:project:roles", ("admin", "viewer")),
        ("missing", ()),
        ("realm_access.missing", ()),
        ("groups.deeper", ()),
        ("number", ()),
        ("", ()),
        ("realm_access", ("roles",)),
    ],
)
def test_claim_at_path(path: str, expected: tuple[str, ...]) -> None:
    assert claim_at_path(KEYCLOAK, path) == expected


def test_claim_at_path_prefers_the_longest_key_and_falls_back() -> None:
    claims = {"a.b": {"c": ["long"]}, "a": {"b": {"c": ["short"]}, "x": ["x"]}}
    assert claim_at_path(claims, "a.b.c") == ("long",)
    assert claim_at_path(claims, "a.x") == ("x",)
    only_nested = {"a.b": {"other": 1}, "a": {"b": {"c": "nested"}}}
    assert claim_at_path(only_nested, "a.b.c") == ("nested",)


# --------------------------------------------------------------------------- VerifiedToken


def base_claims(**extra: Any) -> dict[str, Any]:
    return {
        "iss": "https://idp.example.com/realms/deskpool",
        "sub": "f3a1",
        "aud": "deskpool",
        "exp": 1_900_000_000,
        **extra,
    }


def test_identity_from_claims() -> None:
    identity = VerifiedToken.from_claims(
        base_claims(
            aud=["deskpool", "account"],
            email="ada@example.com",
            email_verified=True,
            name="Ada Lovelace",
            preferred_username="ada",
            jti="t-1",
            realm_access={"roles": ["operator"]},
            groups=["/admins"],
        ),
        groups_claim="groups",
        roles_claim="realm_access.roles",
    )
    assert identity.issuer == "https://idp.example.com/realms/deskpool"
    assert identity.subject == "f3a1"
    assert identity.audience == ("deskpool", "account")
    assert identity.expires_at == 1_900_000_000
    assert identity.email == "ada@example.com"
    assert identity.email_verified is True
    assert identity.name == "Ada Lovelace"
    assert identity.username == "ada"
    assert identity.token_id == "t-1"
    assert identity.groups == ("/admins",)
    assert identity.roles == ("operator",)
    assert identity.claims["realm_access"] == {"roles": ["operator"]}


def test_identity_defaults_when_optional_claims_are_absent() -> None:
    identity = VerifiedToken.from_claims(base_claims())
    assert identity.audience == ("deskpool",)
    assert identity.email is None
    assert identity.email_verified is False
    assert identity.name is None
    assert identity.groups == ()
    assert identity.roles == ()


@pytest.mark.parametrize(
    ("value", "verified"),
    [(True, True), ("true", True), ("TRUE", True), (False, False), ("false", False), (1, False)],
)
def test_email_verified_accepts_the_string_spelling(value: object, verified: bool) -> None:
    identity = VerifiedToken.from_claims(base_claims(email="a@b", email_verified=value))
    assert identity.email_verified is verified


def test_identity_is_frozen_and_its_claims_read_only() -> None:
    identity = VerifiedToken.from_claims(base_claims(groups=["g"]))
    with pytest.raises(AttributeError):
        identity.subject = "someone else"  # type: ignore[misc]
    with pytest.raises(TypeError):
        identity.claims["sub"] = "someone else"  # type: ignore[index]
    assert identity == VerifiedToken.from_claims(base_claims(groups=["g"]))
    assert hash(identity) == hash(VerifiedToken.from_claims(base_claims(groups=["g"])))


# --------------------------------------------------------------------------- bearer header


def test_bearer_token_is_read_case_insensitively() -> None:
    assert bearer_token_from_header("Bearer abc.def.ghi") == "abc.def.ghi"
    assert bearer_token_from_header("bearer   abc.def.ghi  ") == "abc.def.ghi"


@pytest.mark.parametrize("header", [None, "", "   "])
def test_missing_credentials_challenge_without_an_error_code(header: str | None) -> None:
    with pytest.raises(Unauthenticated) as caught:
        bearer_token_from_header(header)
    challenge = caught.value.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert "error=" not in challenge
    assert caught.value.status == 401


@pytest.mark.parametrize(
    "header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer a b", "Bearer é.é.é", "Token x"]
)
def test_malformed_credentials_are_unauthenticated(header: str) -> None:
    with pytest.raises(Unauthenticated) as caught:
        bearer_token_from_header(header)
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer ")


# --------------------------------------------------------------------------- the contract


class StaticProvider(AuthProvider):
    name = "static"

    def __init__(self, state: AuthProviderState) -> None:
        self._state = state

    @property
    def state(self) -> AuthProviderState:
        return self._state

    async def start(self) -> None:
        self._state = AuthProviderState.READY

    async def close(self) -> None:
        self._state = AuthProviderState.CLOSED

    async def verify(self, token: str) -> VerifiedToken:
        raise Unauthenticated("never")


def test_ready_and_configured_follow_the_state() -> None:
    assert StaticProvider(AuthProviderState.READY).ready
    assert not StaticProvider(AuthProviderState.UNAVAILABLE).ready
    assert StaticProvider(AuthProviderState.UNAVAILABLE).configured
    assert not StaticProvider(AuthProviderState.NOT_CONFIGURED).configured
    assert not StaticProvider(AuthProviderState.NOT_CONFIGURED).ready
