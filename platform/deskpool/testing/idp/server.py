"""The identity provider's HTTP side: discovery, keys, the authorization code flow.

:func:`create_app` serves, under the issuer path, ``/.well-known/openid-configuration``,
``/jwks.json`` (and ``/untrusted/jwks.json``, an attacker's keys), ``/authorize`` (signing the
hinted user in at once, or showing :mod:`deskpool.testing.idp_signin`'s page), ``/token``
(authorization code with PKCE S256, refresh token, and client credentials for the registered
clients, authenticated by ``client_secret_basic`` or ``client_secret_post``), ``/userinfo`` and
``/logout``, with CORS open so a browser console on another origin can sign in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus, urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler
from joserfc import jwt
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import KeySet

from deskpool.testing import idp_signin
from deskpool.testing.idp.keys import SIGNING_ALGORITHMS

if TYPE_CHECKING:
    from deskpool.testing.idp import TestIdentityProvider

__all__ = ["AuthorizationCode", "IdentityClient", "RefreshGrant", "create_app"]

CODE_LIFETIME = 60.0


@dataclass
class AuthorizationCode:
    """A code the authorization endpoint handed out, waiting for ``/token``."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    subject: str
    scope: str
    nonce: str | None
    expires_at: float


@dataclass
@dataclass
class RefreshGrant:
    """What a refresh token stands for."""

    client_id: str
    subject: str
    scope: str


@dataclass
class IdentityClient:
    """A client that obtains tokens of its own with the client credentials grant.

    :param client_id: its id; per RFC 9068 §2.2 also the ``sub`` of its tokens.
    :param secret: its secret.
    :param claims: further claims of its access tokens.
    """

    client_id: str
    secret: str
    claims: dict[str, object]


APP_KEY_IDP: web.AppKey[TestIdentityProvider] = web.AppKey("idp")


def create_app(idp: TestIdentityProvider) -> web.Application:
    """The issuer's application, its routes under ``idp.issuer_path``."""
    app = web.Application(middlewares=[_cors])
    app[APP_KEY_IDP] = idp
    prefix = idp.issuer_path
    app.router.add_get(prefix + "/.well-known/openid-configuration", _discovery)
    app.router.add_get(prefix + "/jwks.json", _jwks)
    app.router.add_get(prefix + "/untrusted/jwks.json", _untrusted_jwks)
    app.router.add_get(prefix + "/authorize", _authorize)
    app.router.add_post(prefix + "/authorize", _authorize_submit)
    app.router.add_post(prefix + "/token", _token)
    app.router.add_get(prefix + "/userinfo", _userinfo)
    app.router.add_get(prefix + "/logout", _logout)
    return app


@web.middleware
async def _cors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Let a browser console on another origin read discovery, keys and tokens."""
    cors = {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Headers": "Authorization, Content-Type",
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    }
    if request.method == "OPTIONS":
        return web.Response(status=204, headers=cors)
    try:
        response = await handler(request)
    except web.HTTPException as redirect:
        redirect.headers.update(cors)
        raise
    response.headers.update(cors)
    return response


def _redirect_allowed(redirect_uri: str) -> bool:
    parts = urlsplit(redirect_uri)
    return parts.scheme in {"http", "https"} and bool(parts.netloc) and not parts.fragment


def _oauth_error(error: str, description: str, status: int = 400) -> web.Response:
    return web.json_response(
        {"error": error, "error_description": description},
        status=status,
        headers={"Cache-Control": "no-store"},
    )


async def _discovery(request: web.Request) -> web.Response:
    idp = request.app[APP_KEY_IDP]
    idp.discovery_requests += 1
    return web.json_response(idp.discovery_document())


async def _jwks(request: web.Request) -> web.Response:
    idp = request.app[APP_KEY_IDP]
    idp.jwks_requests += 1
    return web.json_response(idp.jwks(), content_type="application/jwk-set+json")


async def _untrusted_jwks(request: web.Request) -> web.Response:
    idp = request.app[APP_KEY_IDP]
    idp.untrusted_jwks_requests += 1
    return web.json_response({"keys": [k.public_jwk() for k in idp.untrusted_keys]})


async def _authorize_submit(request: web.Request) -> web.Response:
    return await idp_signin.submit_sign_in(request, request.app[APP_KEY_IDP])


async def _authorize(request: web.Request) -> web.Response:
    """Sign in the session's, else the hinted (or default) user and redirect back with a code.

    With the sign-in page on and no browser session, answer the page instead.
    """
    idp = request.app[APP_KEY_IDP]
    query = request.query
    redirect_uri = query.get("redirect_uri", "")
    if not _redirect_allowed(redirect_uri) or not query.get("client_id"):
        return _oauth_error(
            "invalid_request", "client_id and an absolute redirect_uri are required"
        )
    state = query.get("state")
    back: dict[str, str] = {"state": state} if state else {}
    if query.get("response_type") != "code":
        back.update(error="unsupported_response_type")
    elif query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
        back.update(error="invalid_request", error_description="PKCE with S256 is required")
    else:
        subject = idp_signin.signed_in_subject(idp, request)
        if subject is None and idp.sign_in_page:
            return idp_signin.sign_in_page(idp, query, request.path)
        code = secrets.token_urlsafe(24)
        idp._codes[code] = AuthorizationCode(
            client_id=query["client_id"],
            redirect_uri=redirect_uri,
            code_challenge=query["code_challenge"],
            subject=subject or idp._user_for(query.get("login_hint")).subject,
            scope=query.get("scope", "openid"),
            nonce=query.get("nonce"),
            expires_at=time.monotonic() + CODE_LIFETIME,
        )
        back["code"] = code
    separator = "&" if urlsplit(redirect_uri).query else "?"
    raise web.HTTPFound(redirect_uri + separator + urlencode(back))


async def _token(request: web.Request) -> web.Response:
    """Exchange an authorization code (with its PKCE verifier) or a refresh token."""
    idp = request.app[APP_KEY_IDP]
    form = await request.post()
    grant_type = form.get("grant_type")
    client_id = str(form.get("client_id", ""))
    if grant_type == "authorization_code":
        grant = idp._codes.pop(str(form.get("code", "")), None)
        verifier = str(form.get("code_verifier", ""))
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        if (
            grant is None
            or grant.expires_at < time.monotonic()
            or grant.client_id != client_id
            or grant.redirect_uri != form.get("redirect_uri")
            or not hmac.compare_digest(challenge, grant.code_challenge)
        ):
            return _oauth_error("invalid_grant", "the code is unknown, used, expired or mismatched")
        body = idp._tokens_for(grant.subject, grant.client_id, grant.scope, grant.nonce)
    elif grant_type == "refresh_token":
        refresh = idp._refresh.pop(str(form.get("refresh_token", "")), None)
        if refresh is None or refresh.client_id != client_id:
            return _oauth_error("invalid_grant", "the refresh token is unknown or was used")
        body = idp._tokens_for(refresh.subject, refresh.client_id, refresh.scope, None)
    elif grant_type == "client_credentials":
        client_id, secret = _client_credentials(
            request, client_id, str(form.get("client_secret", ""))
        )
        client = idp.clients.get(client_id)
        if client is None or not hmac.compare_digest(secret, client.secret):
            return _oauth_error("invalid_client", "the client is unknown or its secret wrong", 401)
        body = idp._client_tokens(client, str(form.get("scope", "")))
    else:
        return _oauth_error(
            "unsupported_grant_type", "use authorization_code, refresh_token or client_credentials"
        )
    return web.json_response(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


def _client_credentials(request: web.Request, client_id: str, secret: str) -> tuple[str, str]:
    """The client id and secret of a token request: HTTP Basic (RFC 6749 §2.3.1) or the form."""
    scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return client_id, secret
    try:
        decoded = base64.b64decode(encoded, validate=True).decode()
    except ValueError:
        return "", ""
    name, _, password = decoded.partition(":")
    return unquote_plus(name), unquote_plus(password)


async def _userinfo(request: web.Request) -> web.Response:
    idp = request.app[APP_KEY_IDP]
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return web.json_response({"error": "invalid_token"}, status=401)
    keys = KeySet([k.key for k in idp.keys])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SecurityWarning)
            claims = jwt.decode(token.strip(), keys, algorithms=list(SIGNING_ALGORITHMS)).claims
    except (JoseError, ValueError):
        return web.json_response({"error": "invalid_token"}, status=401)
    if float(claims.get("exp", 0)) <= time.time():
        return web.json_response({"error": "invalid_token"}, status=401)
    user = idp.users.get(str(claims.get("sub")))
    return web.json_response({"sub": claims.get("sub"), **(user.claims if user else {})})


async def _logout(request: web.Request) -> web.Response:
    """End the browser session (RP-initiated logout) and go back where the client asked."""
    cleared = idp_signin.end_browser_session(request.app[APP_KEY_IDP], request)
    target = request.query.get("post_logout_redirect_uri", "")
    if _redirect_allowed(target):
        state = request.query.get("state")
        raise web.HTTPFound(
            target + (("?" + urlencode({"state": state})) if state else ""), headers=cleared
        )
    return web.Response(text="Signed out.", headers=cleared)
