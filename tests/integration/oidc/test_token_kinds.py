"""Access tokens are accepted; ID tokens are refused unless the operator accepts them."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from joserfc import jws
from tests.support.oidc import (
    AUDIENCE,
    b64,
    rejected,
    signed_payload,
)

import deskpool_oidc
from deskpool.area_settings import declare_area_settings
from deskpool.config import SettingRegistry, declare_core_settings, load_config
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


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
