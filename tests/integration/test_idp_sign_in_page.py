"""The development issuer's sign-in page: choose a user, single sign-on, and end_session."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.idp_signin import SESSION_COOKIE

REDIRECT = "http://127.0.0.1:9/callback"
PARAMS = {
    "response_type": "code",
    "client_id": "console",
    "redirect_uri": REDIRECT,
    "scope": "openid profile",
    "state": "s-1",
    "code_challenge": "x" * 43,
    "code_challenge_method": "S256",
}


@pytest.fixture
async def idp() -> AsyncIterator[TestIdentityProvider]:
    async with TestIdentityProvider(sign_in_page=True) as provider:
        provider.add_user("carol", email="carol@example.com", name="Carol")
        yield provider


async def _choose(http: aiohttp.ClientSession, idp: TestIdentityProvider, user: str) -> str:
    """Open the page, choose ``user``; the subject of the code handed back."""
    async with http.get(idp.issuer_url + "/authorize", params=PARAMS) as page:
        assert page.status == 200
        body = await page.text()
    assert "Carol" in body
    assert "carol@example.com" in body
    hidden = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', body))
    async with http.post(
        idp.issuer_url + "/authorize", data={**hidden, "user": user}, allow_redirects=False
    ) as chosen:
        assert chosen.status == 303
        follow = chosen.headers["Location"]
    return await _code_subject(http, idp, idp.base_url + follow)


async def _code_subject(http: aiohttp.ClientSession, idp: TestIdentityProvider, url: str) -> str:
    async with http.get(url, allow_redirects=False) as back:
        assert back.status == 302, await back.text()
        location = back.headers["Location"]
    assert location.startswith(REDIRECT)
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["s-1"]
    return idp._codes[query["code"][0]].subject


async def test_the_page_signs_in_the_chosen_user_then_single_sign_on_until_logout(
    idp: TestIdentityProvider,
) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        assert await _choose(http, idp, "carol") == "carol"
        assert len(idp.browser_sessions) == 1
        # The same browser signs in again at once...
        again = idp.issuer_url + "/authorize?" + "&".join(f"{k}={v}" for k, v in PARAMS.items())
        assert await _code_subject(http, idp, again) == "carol"
        # ...until it signs out at the end_session_endpoint.
        async with http.get(
            idp.issuer_url + "/logout",
            params={"post_logout_redirect_uri": "http://127.0.0.1:9/"},
            allow_redirects=False,
        ) as logout:
            assert logout.status == 302
            assert logout.headers["Location"] == "http://127.0.0.1:9/"
            assert f"{SESSION_COOKIE}=;" in logout.headers["Set-Cookie"]
        assert idp.browser_sessions == {}
        async with http.get(idp.issuer_url + "/authorize", params=PARAMS) as page:
            assert page.status == 200
            assert "Sign in" in await page.text()


async def test_an_unknown_user_is_refused(idp: TestIdentityProvider) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(idp.issuer_url + "/authorize", data={**PARAMS, "user": "mallory"}) as refused,
    ):
        assert refused.status == 400
    assert idp.browser_sessions == {}
