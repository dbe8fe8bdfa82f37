"""The oidc auth provider against the test identity provider, over real HTTP on loopback.

Every unacceptable token must end in :class:`Unauthenticated` (401), never in another
exception; an issuer that cannot be reached must end in :class:`ServiceUnavailable` (503).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from joserfc import jws

import deskpool_oidc
from deskpool.area_settings import declare_area_settings
from deskpool.auth import AuthProviderState, bearer_token_from_header
from deskpool.config import SettingRegistry, declare_core_settings, load_config
from deskpool.errors import AuthNotConfigured, ServiceUnavailable, Unauthenticated
from deskpool.registry import Registry
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


# --------------------------------------------------------------------------- accepted


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


# --------------------------------------------------------------------------- no or malformed


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


# --------------------------------------------------------------------------- claims


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


# --------------------------------------------------------------------------- keys


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


# --------------------------------------------------------------------------- forgeries


async def test_alg_none_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.forge_alg_none())
    assert "algorithm" in error.detail
    assert idp.jwks_requests == 1


async def test_hs256_signed_with_the_public_key_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    error = await rejected(verifier, idp.forge_hs256_with_public_key())
    assert "algorithm" in error.detail


@pytest.mark.parametrize("impersonate", [False, True])
async def test_an_embedded_jwk_header_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, impersonate: bool
) -> None:
    kid = idp.current_kid if impersonate else None
    await rejected(verifier, idp.forge_embedded_jwk(kid=kid))
    assert idp.jwks_requests == 1


async def test_a_jku_header_is_unauthenticated_and_never_followed(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    await rejected(verifier, idp.forge_jku())
    assert idp.untrusted_jwks_requests == 0
    assert idp.jwks_requests == 1


async def test_an_x5u_header_is_unauthenticated_and_never_followed(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    await rejected(verifier, idp.forge_x5u())
    assert idp.untrusted_jwks_requests == 0


async def test_a_key_of_the_wrong_type_for_the_algorithm_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    es_kid = next(k.kid for k in idp.keys if k.alg == "ES256")
    rs_key = idp.key(idp.current_kid)
    # Signed by the RSA key but naming the EC key: the EC key cannot verify RS256.
    token = jws.serialize_compact(
        {"alg": "RS256", "kid": es_kid},
        json.dumps(idp.token_claims()).encode(),
        rs_key.key,
        algorithms=["RS256"],
    )
    await rejected(verifier, token)


async def test_crit_and_b64_headers_are_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    token = idp.issue_token(headers={"b64": False, "crit": ["b64"]})
    await rejected(verifier, token)


# --------------------------------------------------------------------------- availability


async def test_an_unreachable_issuer_answers_503_then_recovers(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    idp = TestIdentityProvider(audience=AUDIENCE)
    issuer = idp.bind()  # the address is known; connections are refused
    verifier = make_verifier(issuer)
    try:
        await verifier.start()  # must not raise
        assert verifier.state is AuthProviderState.UNAVAILABLE
        assert not verifier.ready
        assert verifier.last_error is not None
        with pytest.raises(ServiceUnavailable) as caught:
            await verifier.verify(idp.issue_token())
        assert caught.value.status == 503
        assert "Retry-After" in caught.value.headers
        await idp.start()
        await asyncio.wait_for(verifier.wait_until_ready(), timeout=30)
        assert verifier.ready
        assert (await verifier.verify(idp.issue_token("ada"))).subject == "ada"
        assert verifier.stats.discovery_attempts >= 2
    finally:
        await verifier.close()
        await idp.stop()


async def test_a_discovery_document_naming_another_issuer_is_not_trusted(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> None:
    other_spelling = idp.issuer_url.replace("127.0.0.1", "localhost")
    verifier = make_verifier(other_spelling)
    try:
        await verifier.start()
        assert verifier.state is AuthProviderState.UNAVAILABLE
        assert "issuer" in (verifier.last_error or "")
        with pytest.raises(ServiceUnavailable):
            await verifier.verify(idp.issue_token())
    finally:
        await verifier.close()


async def test_an_unconfigured_provider_answers_auth_not_configured(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    verifier = make_verifier("", audience="")
    await verifier.start()
    assert verifier.state is AuthProviderState.NOT_CONFIGURED
    assert not verifier.configured
    with pytest.raises(AuthNotConfigured) as caught:
        await verifier.verify("anything")
    assert caught.value.status == 503
    await verifier.close()


async def test_a_closed_provider_verifies_nothing(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> None:
    verifier = make_verifier(idp.issuer_url)
    await verifier.start()
    token = idp.issue_token()
    await verifier.verify(token)
    await verifier.close()
    with pytest.raises(ServiceUnavailable):
        await verifier.verify(token)


# --------------------------------------------------------------------------- the plugin


async def test_the_plugin_registers_a_factory_reading_the_configuration(
    idp: TestIdentityProvider,
) -> None:
    registry: Registry[Any] = Registry("auth provider")
    deskpool_oidc.deskpool_register_auth_providers(registry)
    settings = SettingRegistry()
    declare_core_settings(settings)
    declare_area_settings(settings)
    deskpool_oidc.deskpool_declare_settings(settings)
    config = load_config(
        settings,
        {
            "DATABASE_URL": "postgresql://127.0.0.1:5432/unused",
            "KVSTORE_ADDR": "127.0.0.1:6379",
            "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
            "AUTH_OIDC_AUDIENCE": AUDIENCE,
            "AUTH_OIDC_GROUPS_CLAIM": "realm_access.groups",
        },
    )
    provider = registry.get("oidc")(config)
    assert isinstance(provider, OidcAuthProvider)
    await provider.start()
    try:
        token = idp.issue_token("ada", realm_access={"groups": ["ops"]}, roles="auditor")
        identity = await provider.verify(token)
    finally:
        await provider.close()
    assert identity.groups == ("ops",)
    assert identity.roles == ("auditor",)


# --------------------------------------------------------------------------- token kinds


def id_token_claims(idp: TestIdentityProvider, **claims: Any) -> str:
    """A token typed ``JWT`` (as ID tokens are) for the API's audience, with ``claims``."""
    return idp.issue_token("alice", headers={"typ": "JWT"}, **claims)


@pytest.mark.parametrize(
    "marker",
    [
        {"nonce": "n-0S6_WzA2Mj"},
        {"at_hash": "77QmUPtjPfzWtF2AnpK9RQ"},
        {"c_hash": "LDktKdoQak3Pk0cnXxCltA"},
        {"s_hash": "5ZWbY4SbldwpPKWwS7Gtbw"},
        {"typ": "ID", "azp": "deskpool"},
    ],
    ids=["nonce", "at_hash", "c_hash", "s_hash", "keycloak-typ-ID"],
)
async def test_an_id_token_for_the_api_audience_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, marker: dict[str, Any]
) -> None:
    error = await rejected(verifier, id_token_claims(idp, **marker))
    assert "ID token" in error.detail
    assert 'error="invalid_token"' in error.headers["WWW-Authenticate"]


async def test_an_untyped_id_token_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    body = idp.token_claims("alice", nonce="abc")
    await rejected(verifier, signed_payload(idp, json.dumps(body).encode()))


@pytest.mark.parametrize("typ", ["logout+jwt", "dpop+jwt", "application/secevent+jwt"])
async def test_a_token_typed_as_another_kind_of_jwt_is_unauthenticated(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, typ: str
) -> None:
    error = await rejected(verifier, idp.issue_token("alice", headers={"typ": typ}))
    assert "another kind of JWT" in error.detail


@pytest.mark.parametrize("typ", ["at+jwt", "AT+JWT", "application/at+jwt"])
async def test_a_token_typed_at_jwt_is_an_access_token(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, typ: str
) -> None:
    # RFC 9068: the type says what the token is, whatever else it carries.
    token = idp.issue_token("alice", headers={"typ": typ}, nonce="n", typ="Bearer")
    assert (await verifier.verify(token)).subject == "alice"


@pytest.mark.parametrize("typ", ["JWT", None])
async def test_an_access_token_without_id_token_markers_is_accepted(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, typ: str | None
) -> None:
    # Keycloak, Entra ID, Okta and Auth0 type their access tokens JWT (or not at all).
    body = idp.token_claims("alice", typ="Bearer", azp="deskpool-console", scope="openid")
    header = {"alg": "RS256", "kid": idp.current_kid} | ({"typ": typ} if typ else {})
    key = idp.key(idp.current_kid)
    token = jws.serialize_compact(header, json.dumps(body).encode(), key.key, algorithms=["RS256"])
    assert (await verifier.verify(token)).subject == "alice"


async def sign_in(idp: TestIdentityProvider, client_id: str, nonce: str | None) -> dict[str, Any]:
    """The token response of the authorization code flow with PKCE, over HTTP."""
    verifier_text = "v" * 64
    challenge = b64(hashlib.sha256(verifier_text.encode()).digest())
    redirect = "http://127.0.0.1/callback"
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "scope": "openid email",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **({"nonce": nonce} if nonce else {}),
    }
    async with aiohttp.ClientSession() as session:
        async with session.get(
            idp.issuer_url + "/authorize", params=query, allow_redirects=False
        ) as response:
            code = parse_qs(urlsplit(response.headers["Location"]).query)["code"][0]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": redirect,
            "code_verifier": verifier_text,
        }
        async with session.post(idp.issuer_url + "/token", data=form) as response:
            body: dict[str, Any] = await response.json()
            return body


@pytest.mark.parametrize("nonce", ["n-42", None])
async def test_the_console_id_token_is_refused_even_when_its_audience_is_the_api_audience(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, nonce: str | None
) -> None:
    # The mistake issue 11 found: AUTH_OIDC_AUDIENCE set to the console's client id.
    tokens = await sign_in(idp, client_id=AUDIENCE, nonce=nonce)
    assert (await verifier.verify(tokens["access_token"])).subject == "dev-admin"
    await rejected(verifier, tokens["id_token"])


async def test_id_tokens_are_accepted_when_the_operator_says_so(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> None:
    verifier = make_verifier(idp.issuer_url, accept_id_tokens=True)
    await verifier.start()
    tokens = await sign_in(idp, client_id=AUDIENCE, nonce="n-1")
    assert (await verifier.verify(tokens["id_token"])).subject == "dev-admin"


async def test_deskpool_dev_accepts_its_access_tokens_and_refuses_its_id_tokens(
    tmp_path: Path,
) -> None:
    from deskpool.dev import DEV_API_AUDIENCE, DEV_CLIENT_ID, dev_environ
    from deskpool.testing.idp import DevIdentityProvider

    issuer = DevIdentityProvider(tmp_path / "keys.json", audience=DEV_API_AUDIENCE)
    issuer.sign_in_page = False  # sign the default user in at once
    async with issuer:
        environ = dev_environ(
            {"DATABASE_URL": "postgresql://127.0.0.1:5432/unused", "KVSTORE_ADDR": "x:1"},
            issuer.issuer_url,
        )
        assert environ["AUTH_OIDC_AUDIENCE"] != environ["WEB_PUBLIC_OIDC_CLIENT_ID"]
        settings = SettingRegistry()
        declare_core_settings(settings)
        declare_area_settings(settings)
        deskpool_oidc.deskpool_declare_settings(settings)
        provider = deskpool_oidc.create_provider(load_config(settings, environ))
        await provider.start()
        try:
            tokens = await sign_in(issuer, client_id=DEV_CLIENT_ID, nonce=None)
            header = json.loads(
                base64.urlsafe_b64decode(tokens["access_token"].split(".")[0] + "==")
            )
            assert header["typ"] == "at+jwt"
            assert (await provider.verify(tokens["access_token"])).audience == (DEV_API_AUDIENCE,)
            await rejected(provider, tokens["id_token"])
        finally:
            await provider.close()


# ------------------------------------------------- tokens shaped like real issuers' tokens

#: The JOSE header ``typ`` and the claims (beyond iss, sub, aud, iat, exp, jti) of each issuer's
#: tokens, after the issuers' documentation and tokens they issued (see
#: ``deskpool_oidc.token_types``). ``aud`` is the API audience for both: the set-up of issue 21,
#: where ``AUTH_OIDC_AUDIENCE`` is the console's client id.
ACCESS_TOKENS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "keycloak": (
        "JWT",
        {
            "typ": "Bearer",
            "azp": "deskpool-console",
            "scope": "openid profile email",
            "sid": "5b8a0f2e-6d1c-4a0b-9f0e-1c2d3e4f5a6b",
            "realm_access": {"roles": ["default-roles-corp"]},
            "preferred_username": "alice",
        },
    ),
    "entra-delegated": (
        "JWT",
        {
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "0",
            "scp": "access_as_user",
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
            "uti": "fqiBqXLPj0eQa82S-IYFAA",
            "rh": "I",
        },
    ),
    "entra-application": (
        "JWT",
        {
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "1",
            "roles": ["Deskpool.Operate"],
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
        },
    ),
    "okta": (
        None,
        {
            "ver": 1,
            "cid": "0oa1b2c3d4e5f6g7h8i9",
            "uid": "00u1b2c3d4e5f6g7h8i9",
            "scp": ["openid", "profile", "email", "groups"],
            "auth_time": 1688145909,
        },
    ),
    "auth0": (
        "JWT",
        {
            "azp": "K1AUPhZq8mRi0Q0pjhkfu1D7y6KjDQja",
            "scope": "openid profile email",
            "permissions": [],
        },
    ),
    "auth0-rfc9068": (
        "at+jwt",
        {"client_id": "K1AUPhZq8mRi0Q0pjhkfu1D7y6KjDQja", "scope": "openid profile email"},
    ),
    "oidc-provider": (
        "at+jwt",
        {"client_id": "deskpool-console", "scope": "openid email"},
    ),
}

ID_TOKENS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "keycloak": (
        "JWT",
        {
            "typ": "ID",
            "azp": "deskpool",
            "sid": "5b8a0f2e-6d1c-4a0b-9f0e-1c2d3e4f5a6b",
            "auth_time": 1688145909,
            "at_hash": "Ghv0Ahz_nyw1JxnFJbfvFg",
            "preferred_username": "alice",
        },
    ),
    "keycloak-no-hash": (
        "JWT",
        {"typ": "ID", "azp": "deskpool", "preferred_username": "alice"},
    ),
    "entra": (
        "JWT",
        {
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
            "ver": "2.0",
            "uti": "fqiBqXLPj0eQa82S-IYFAA",
            "rh": "I",
            "preferred_username": "alice@example.com",
            "name": "Alice",
        },
    ),
    "entra-nonce": (
        "JWT",
        {"oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474", "ver": "2.0", "nonce": "n-8x3"},
    ),
    "okta": (
        None,
        {
            "ver": 1,
            "amr": ["pwd"],
            "idp": "00o1b2c3d4e5f6g7h8i9",
            "auth_time": 1688145909,
            "at_hash": "fPlsvVszI29LU2UhDyJ9vg",
            "preferred_username": "alice@example.com",
        },
    ),
    "okta-no-hash": (
        None,
        {"ver": 1, "amr": ["pwd"], "idp": "00o1b2c3d4e5f6g7h8i9", "auth_time": 1688145909},
    ),
    "auth0": (
        "JWT",
        {
            "name": "Jane Doe",
            "nickname": "jane",
            "picture": "https://example.com/jane.png",
            "email": "jane@example.com",
            "email_verified": True,
            "sid": "Ud2YEuWs3tV1ZCF8wplyX0nZTvE0vl9i",
        },
    ),
    "oidc-provider": (
        None,
        {"auth_time": 1688145909, "sid": "kWmB3v2oUuK5M6gSxS0Qy"},
    ),
    "oidc-provider-hashes": (
        None,
        {"at_hash": "x3eHBBAWOxDjAqDZZ8tQLw", "nonce": "n-1", "auth_time": 1688145909},
    ),
}


def shaped(idp: TestIdentityProvider, typ: str | None, claims: dict[str, Any]) -> str:
    """A token signed by the test issuer with the header ``typ`` (or none) and ``claims``."""
    body = idp.token_claims("alice", **claims)
    header = {"alg": "RS256", "kid": idp.current_kid} | ({"typ": typ} if typ else {})
    key = idp.key(idp.current_kid)
    return jws.serialize_compact(header, json.dumps(body).encode(), key.key, algorithms=["RS256"])


@pytest.mark.parametrize("issuer", sorted(ACCESS_TOKENS))
async def test_access_tokens_shaped_like_each_issuers_are_accepted(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, issuer: str
) -> None:
    token = shaped(idp, *ACCESS_TOKENS[issuer])
    assert (await verifier.verify(token)).subject == "alice"


@pytest.mark.parametrize("issuer", sorted(ID_TOKENS))
async def test_id_tokens_shaped_like_each_issuers_are_refused(
    idp: TestIdentityProvider, verifier: OidcAuthProvider, issuer: str
) -> None:
    error = await rejected(verifier, shaped(idp, *ID_TOKENS[issuer]))
    assert "access token" in error.detail
    assert 'error="invalid_token"' in error.headers["WWW-Authenticate"]


async def test_a_code_flow_id_token_without_nonce_or_at_hash_is_refused(
    idp: TestIdentityProvider, verifier: OidcAuthProvider
) -> None:
    """The token issue 21 found accepted: ``typ: JWT``, no ``nonce``, no ``at_hash``."""
    error = await rejected(verifier, shaped(idp, "JWT", {"azp": AUDIENCE, "email": "a@b.c"}))
    assert "not typed at+jwt" in error.detail
    for claim in ("scope", "scp", "client_id", "roles"):
        token = shaped(idp, "JWT", {"azp": AUDIENCE, claim: "x"})
        assert (await verifier.verify(token)).subject == "alice", claim
    for typ in ("at+jwt", "application/at+jwt"):
        assert (await verifier.verify(shaped(idp, typ, {}))).subject == "alice", typ


@pytest.mark.parametrize("issuer", sorted(ID_TOKENS))
async def test_each_issuers_id_tokens_pass_when_the_operator_accepts_id_tokens(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider], issuer: str
) -> None:
    verifier = make_verifier(idp.issuer_url, accept_id_tokens=True)
    await verifier.start()
    assert (await verifier.verify(shaped(idp, *ID_TOKENS[issuer]))).subject == "alice"
