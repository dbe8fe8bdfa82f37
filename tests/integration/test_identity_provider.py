"""The test and development identity provider, as a browser and a verifier see it over HTTP."""

from __future__ import annotations

import base64
import hashlib
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from deskpool.testing.idp import DevIdentityProvider, TestIdentityProvider
from deskpool_oidc import OidcAuthProvider, OidcSettings

REDIRECT = "http://127.0.0.1:9/callback"


@pytest.fixture
async def idp() -> AsyncIterator[TestIdentityProvider]:
    async with TestIdentityProvider() as provider:
        provider.add_user("bob", email="bob@example.com", groups=["ops"])
        yield provider


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def authorize(
    http: aiohttp.ClientSession, idp: TestIdentityProvider, challenge: str, **extra: str
) -> dict[str, list[str]]:
    params = {
        "response_type": "code",
        "client_id": "console",
        "redirect_uri": REDIRECT,
        "scope": "openid profile email offline_access",
        "state": "s-1",
        "nonce": "n-1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }
    async with http.get(idp.issuer_url + "/authorize", params=params, allow_redirects=False) as r:
        assert r.status == 302
        location = r.headers["Location"]
    assert location.startswith(REDIRECT + "?")
    return parse_qs(urlsplit(location).query)


async def test_discovery_and_jwks_are_served(
    idp: TestIdentityProvider, http: aiohttp.ClientSession
) -> None:
    async with http.get(idp.issuer_url + "/.well-known/openid-configuration") as response:
        document = await response.json()
    assert document["issuer"] == idp.issuer_url
    assert document["code_challenge_methods_supported"] == ["S256"]
    async with http.get(document["jwks_uri"]) as response:
        jwks = await response.json(content_type=None)
    assert {key["kid"] for key in jwks["keys"]} == {k.kid for k in idp.keys}
    assert all("d" not in key for key in jwks["keys"])
    assert (idp.discovery_requests, idp.jwks_requests) == (1, 1)


async def test_rotation_publishes_the_new_key_and_drops_the_old(idp: TestIdentityProvider) -> None:
    old = idp.current_kid
    new = idp.rotate("ES256")
    published = {key["kid"] for key in idp.jwks()["keys"]}
    assert new in published
    assert old not in published
    assert idp.current_kid == new


async def test_authorization_code_flow_with_pkce(
    idp: TestIdentityProvider, http: aiohttp.ClientSession
) -> None:
    verifier, challenge = pkce()
    query = await authorize(http, idp, challenge, login_hint="bob@example.com")
    assert query["state"] == ["s-1"]
    form = {
        "grant_type": "authorization_code",
        "code": query["code"][0],
        "code_verifier": verifier,
        "redirect_uri": REDIRECT,
        "client_id": "console",
    }
    async with http.post(idp.issuer_url + "/token", data=form) as response:
        assert response.status == 200
        tokens = await response.json()
    assert tokens["token_type"] == "Bearer"
    provider = OidcAuthProvider(OidcSettings(idp.issuer_url, idp.audience))
    await provider.start()
    try:
        identity = await provider.verify(tokens["access_token"])
    finally:
        await provider.close()
    assert identity.subject == "bob"
    assert identity.groups == ("ops",)

    headers = {"Authorization": f"Bearer {tokens['access_token']}"}
    async with http.get(idp.issuer_url + "/userinfo", headers=headers) as response:
        assert (await response.json())["email"] == "bob@example.com"

    # A code is single-use.
    async with http.post(idp.issuer_url + "/token", data=form) as response:
        assert response.status == 400
        assert (await response.json())["error"] == "invalid_grant"

    # offline_access gave a refresh token, also single-use.
    refresh = {
        "grant_type": "refresh_token",
        "refresh_token": tokens["refresh_token"],
        "client_id": "console",
    }
    async with http.post(idp.issuer_url + "/token", data=refresh) as response:
        assert response.status == 200
        assert "access_token" in await response.json()
    async with http.post(idp.issuer_url + "/token", data=refresh) as response:
        assert response.status == 400


async def test_a_wrong_pkce_verifier_is_refused(
    idp: TestIdentityProvider, http: aiohttp.ClientSession
) -> None:
    _, challenge = pkce()
    query = await authorize(http, idp, challenge)
    form = {
        "grant_type": "authorization_code",
        "code": query["code"][0],
        "code_verifier": "not-the-verifier",
        "redirect_uri": REDIRECT,
        "client_id": "console",
    }
    async with http.post(idp.issuer_url + "/token", data=form) as response:
        assert response.status == 400


async def test_plain_pkce_is_refused(
    idp: TestIdentityProvider, http: aiohttp.ClientSession
) -> None:
    query = await authorize(http, idp, "challenge", code_challenge_method="plain")
    assert query["error"] == ["invalid_request"]
    assert "code" not in query


async def test_the_dev_provider_keeps_its_keys_across_restarts(tmp_path: Path) -> None:
    key_file = tmp_path / "dev" / "idp-keys.json"
    first = DevIdentityProvider(key_file)
    issuer = await first.start()
    token = first.issue_token("dev-admin")
    port = int(urlsplit(issuer).port or 0)
    await first.stop()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    second = DevIdentityProvider(key_file)
    await second.start(port=port)
    try:
        assert second.current_kid == first.current_kid
        provider = OidcAuthProvider(OidcSettings(second.issuer_url, second.audience))
        await provider.start()
        try:
            assert (await provider.verify(token)).subject == "dev-admin"
        finally:
            await provider.close()
    finally:
        await second.stop()


async def test_a_browser_on_another_origin_may_call_it(
    idp: TestIdentityProvider, http: aiohttp.ClientSession
) -> None:
    preflight = {
        "Origin": "http://127.0.0.1:8082",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    }
    async with http.options(idp.issuer_url + "/userinfo", headers=preflight) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    discovery = idp.issuer_url + "/.well-known/openid-configuration"
    async with http.get(discovery, headers={"Origin": "http://x"}) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "*"


async def test_it_refuses_to_listen_beyond_loopback_unless_allowed() -> None:
    with pytest.raises(ValueError, match="loopback"):
        TestIdentityProvider().bind("0.0.0.0")
    allowed = TestIdentityProvider(allow_remote=True)
    allowed.bind("0.0.0.0")
    try:
        assert allowed.issuer_url.startswith("http://0.0.0.0:")
    finally:
        await allowed.stop()
