"""An in-process OpenID Connect identity provider for tests and for ``deskpool dev``.

:class:`TestIdentityProvider` is a real OIDC issuer on the loopback interface (an aiohttp server
on a random port). It serves what a verifier reads from an issuer, over real HTTP:

- ``/.well-known/openid-configuration`` (OIDC Discovery 1.0) and ``/jwks.json`` (RFC 7517),
  with request counters so tests can check how often a verifier fetched them;
- the authorization code flow with PKCE (``/authorize``, ``/token``, ``/userinfo``,
  ``/logout``), signing in a registered user at once, without a form, so a browser (the
  console, the ``/docs`` page) can sign in against it unattended.

It issues tokens the way ``docs/operators/identity.md`` advises an identity provider to be set
up: access tokens are typed ``at+jwt`` (RFC 9068), carry ``client_id`` and ``scope``, and are
for the API's own audience (:data:`DEFAULT_AUDIENCE`, ``deskpool-api``), distinct from the
console's client id; ID tokens are for the client that signed in, carry ``at_hash`` (and the
``nonce`` the client sent), and so are refused as bearer tokens.

Signing keys are RS256, RS384, RS512, PS256, ES256, ES384 or EdDSA, created with joserfc; keys
can be added unpublished, published, retired and rotated. :meth:`TestIdentityProvider.issue_token`
signs access tokens with any claims and lifetimes, and the ``forge_*`` methods build the tokens
an attacker would send (``alg: none``, HS256 keyed with the public key, an embedded ``jwk``, a
``jku`` or ``x5u`` pointing elsewhere, a key the issuer never published).

:class:`DevIdentityProvider` is the same issuer with fixed keys kept in a file, so the tokens
of a development sign-in stay valid across restarts of ``deskpool dev``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler
from joserfc import jwt
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import ECKey, Key, KeyParameters, KeySet, OctKey, OKPKey, RSAKey, import_key
from joserfc.util import json_b64encode, urlsafe_b64encode

from deskpool.testing import idp_signin

__all__ = [
    "DEFAULT_AUDIENCE",
    "DEFAULT_CLIENT_ID",
    "DevIdentityProvider",
    "IdentityUser",
    "SigningKey",
    "TestIdentityProvider",
]

#: The audience access tokens are issued for unless a test says otherwise: the API's own, not
#: a client id (the console signs in as :data:`DEFAULT_CLIENT_ID`).
DEFAULT_AUDIENCE = "deskpool-api"
#: The client id the console (and ``/docs``) signs in as by default.
DEFAULT_CLIENT_ID = "deskpool-console"

#: Signing algorithms the identity provider can create keys for.
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")

_CODE_LIFETIME = 60.0


def _generate_private_key(alg: str, kid: str) -> Key:
    parameters: KeyParameters = {"kid": kid, "use": "sig", "alg": alg}
    if alg.startswith(("RS", "PS")):
        return RSAKey.generate_key(2048, parameters=parameters)
    if alg == "ES256":
        return ECKey.generate_key("P-256", parameters=parameters)
    if alg == "ES384":
        return ECKey.generate_key("P-384", parameters=parameters)
    if alg == "EdDSA":
        return OKPKey.generate_key("Ed25519", parameters=parameters)
    raise ValueError(f"cannot create a signing key for {alg!r}; use one of {SIGNING_ALGORITHMS}")


def _sign(header: Mapping[str, Any], claims: Mapping[str, Any], key: Key) -> str:
    alg = str(header["alg"])
    with warnings.catch_warnings():
        # joserfc flags EdDSA (superseded by Ed25519 in RFC 9864) and "none"; both are wanted here.
        warnings.simplefilter("ignore", SecurityWarning)
        return jwt.encode(dict(header), dict(claims), key, algorithms=[alg])


@dataclass
class SigningKey:
    """A private key of the identity provider.

    :param key: the joserfc private key (its ``kid``, ``alg`` and ``use`` are set).
    :param published: whether ``/jwks.json`` lists its public half.
    """

    key: Key
    published: bool = True

    @property
    def kid(self) -> str:
        """The key id."""
        return str(self.key.kid)

    @property
    def alg(self) -> str:
        """The signing algorithm the key is for."""
        return str(self.key.alg)

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK, as ``/jwks.json`` lists it."""
        return dict(self.key.as_dict(private=False))

    def public_pem(self) -> bytes:
        """The public key in PEM (what an HS256 key-confusion attack uses as the secret)."""
        if isinstance(self.key, OctKey):
            raise TypeError("a symmetric key has no public half")
        return bytes(self.key.as_pem(private=False))

    @classmethod
    def generate(
        cls, alg: str = "RS256", *, kid: str | None = None, published: bool = True
    ) -> SigningKey:
        """Create a new key for ``alg``, with a random ``kid`` unless one is given."""
        return cls(_generate_private_key(alg, kid or secrets.token_urlsafe(12)), published)


@dataclass
class IdentityUser:
    """A user the identity provider signs in through the authorization code flow.

    :param subject: the ``sub`` claim.
    :param claims: further claims of its tokens (``email``, ``name``, ``groups``...).
    """

    subject: str
    claims: dict[str, Any] = field(default_factory=dict)


@dataclass
class _AuthorizationCode:
    client_id: str
    redirect_uri: str
    code_challenge: str
    subject: str
    scope: str
    nonce: str | None
    expires_at: float


@dataclass
class _RefreshGrant:
    client_id: str
    subject: str
    scope: str


APP_KEY_IDP: web.AppKey[TestIdentityProvider] = web.AppKey("idp")


class TestIdentityProvider:
    """An OIDC issuer on ``127.0.0.1`` for tests (see the module documentation).

    :param audience: the ``aud`` of issued access tokens unless a call says otherwise.
    :param keys: the signing keys; one new RS256 and one new ES256 key when omitted. The first
        published key of each algorithm signs by default; the very first is the current key.
    :param issuer_path: a path appended to ``http://127.0.0.1:<port>`` to form the issuer URL
        (``/realms/deskpool``), to exercise issuers that are not at the root.
    :param users: users the authorization code flow signs in; the first is the default.
    :param token_lifetime: lifetime in seconds of tokens from the authorization code flow.
    :param allow_remote: allow listening on an address that is not loopback.
    :param sign_in_page: show a page to choose the user at ``/authorize`` (and keep a browser
        session that ``/logout`` ends) instead of signing the hinted user in at once.
    """

    __test__ = False  # a helper, not a test class pytest should collect

    def __init__(
        self,
        *,
        audience: str = DEFAULT_AUDIENCE,
        keys: Iterable[SigningKey] | None = None,
        issuer_path: str = "",
        users: Iterable[IdentityUser] | None = None,
        token_lifetime: float = 3600.0,
        allow_remote: bool = False,
        sign_in_page: bool = False,
    ) -> None:
        self.audience = audience
        self.allow_remote = allow_remote
        #: Whether ``/authorize`` shows a page to choose the user (see :mod:`.idp_signin`).
        self.sign_in_page = sign_in_page
        #: Browser sessions of the sign-in page: session id to subject.
        self.browser_sessions: dict[str, str] = {}
        self.issuer_path = "/" + issuer_path.strip("/") if issuer_path.strip("/") else ""
        self.token_lifetime = token_lifetime
        self._keys: list[SigningKey] = list(keys) if keys is not None else []
        if not self._keys:
            self._keys = [SigningKey.generate("RS256"), SigningKey.generate("ES256")]
        self._current_kid = self._keys[0].kid
        #: Keys an attacker controls, served at ``/untrusted/jwks.json`` (a ``jku`` target).
        self.untrusted_keys: list[SigningKey] = []
        self.users: dict[str, IdentityUser] = {}
        for user in users or (
            IdentityUser(
                "dev-admin",
                {
                    "email": "admin@deskpool.test",
                    "email_verified": True,
                    "name": "Development Administrator",
                    "preferred_username": "admin",
                    "groups": ["deskpool-admins"],
                },
            ),
        ):
            self.users[user.subject] = user
        #: How many times each endpoint was requested.
        self.discovery_requests = 0
        self.jwks_requests = 0
        self.untrusted_jwks_requests = 0
        self._codes: dict[str, _AuthorizationCode] = {}
        self._refresh: dict[str, _RefreshGrant] = {}
        self._socket: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self._host = "127.0.0.1"
        self._port: int | None = None

    # ------------------------------------------------------------------------------ server

    def bind(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Reserve the listening address without accepting connections yet.

        Until :meth:`start`, connections to :attr:`issuer_url` are refused: an issuer that is
        down, with a known address.

        :returns: the issuer URL.
        :raises ValueError: for an address that is not loopback, unless ``allow_remote`` was
            given: whoever reaches this issuer signs in without a password.
        """
        if self._socket is not None or self._runner is not None:
            raise RuntimeError("the identity provider is already bound")
        if not self.allow_remote and not _is_loopback(host):
            raise ValueError(
                f"refusing to serve an identity provider that signs anyone in on {host!r}; "
                "use a loopback address (or allow_remote=True inside an isolated container)"
            )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self._host = host
        self._port = int(sock.getsockname()[1])
        return self.issuer_url

    async def start(self, host: str | None = None, port: int | None = None) -> str:
        """Serve on ``host:port`` (loopback and a random port by default, or the bound address).

        :returns: the issuer URL.
        """
        if self._runner is not None:
            raise RuntimeError("the identity provider is already running")
        if self._socket is None:
            self.bind(host or self._host, port if port is not None else (self._port or 0))
        assert self._socket is not None
        app = web.Application(middlewares=[_cors])
        app[APP_KEY_IDP] = self
        prefix = self.issuer_path
        app.router.add_get(prefix + "/.well-known/openid-configuration", _discovery)
        app.router.add_get(prefix + "/jwks.json", _jwks)
        app.router.add_get(prefix + "/untrusted/jwks.json", _untrusted_jwks)
        app.router.add_get(prefix + "/authorize", _authorize)
        app.router.add_post(prefix + "/authorize", _authorize_submit)
        app.router.add_post(prefix + "/token", _token)
        app.router.add_get(prefix + "/userinfo", _userinfo)
        app.router.add_get(prefix + "/logout", _logout)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, self._socket)
        await site.start()
        self._runner = runner
        return self.issuer_url

    async def stop(self) -> None:
        """Stop serving; :meth:`start` may be called again (on the same port by default)."""
        runner, self._runner = self._runner, None
        sock, self._socket = self._socket, None
        if runner is not None:
            await runner.cleanup()
        if sock is not None:
            sock.close()

    async def __aenter__(self) -> TestIdentityProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        """Whether it accepts connections."""
        return self._runner is not None

    @property
    def base_url(self) -> str:
        """``http://host:port``, without the issuer path."""
        if self._port is None:
            raise RuntimeError("the identity provider is not bound; call bind() or start()")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    @property
    def issuer_url(self) -> str:
        """The issuer URL (``AUTH_OIDC_ISSUER_URL``), also the ``iss`` of issued tokens."""
        return self.base_url + self.issuer_path

    @property
    def jwks_uri(self) -> str:
        """Where the published keys are served."""
        return self.issuer_url + "/jwks.json"

    @property
    def untrusted_jwks_uri(self) -> str:
        """Where :attr:`untrusted_keys` are served (what a ``jku`` attack points at)."""
        return self.issuer_url + "/untrusted/jwks.json"

    def discovery_document(self) -> dict[str, Any]:
        """The OpenID Provider metadata served at ``/.well-known/openid-configuration``."""
        issuer = self.issuer_url
        algorithms = sorted({k.alg for k in self._keys if k.published})
        return {
            "issuer": issuer,
            "jwks_uri": issuer + "/jwks.json",
            "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token",
            "userinfo_endpoint": issuer + "/userinfo",
            "end_session_endpoint": issuer + "/logout",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": algorithms,
            "scopes_supported": ["openid", "profile", "email", "groups", "offline_access"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "iss", "aud", "exp", "iat", "email", "name", "groups"],
        }

    # -------------------------------------------------------------------------------- keys

    @property
    def current_kid(self) -> str:
        """The key id that signs tokens when no ``kid`` or ``alg`` is asked for."""
        return self._current_kid

    @property
    def keys(self) -> list[SigningKey]:
        """Every signing key, published or not."""
        return list(self._keys)

    def jwks(self) -> dict[str, Any]:
        """The JWK Set served at ``/jwks.json``: the public half of every published key."""
        return {"keys": [k.public_jwk() for k in self._keys if k.published]}

    def key(self, kid: str) -> SigningKey:
        """The signing key ``kid``."""
        for signing_key in self._keys:
            if signing_key.kid == kid:
                return signing_key
        raise KeyError(f"no signing key {kid!r}")

    def add_key(
        self,
        alg: str = "RS256",
        *,
        kid: str | None = None,
        publish: bool = True,
        make_current: bool = False,
    ) -> str:
        """Create a signing key; return its ``kid``.

        :param publish: list it in ``/jwks.json`` now (else :meth:`publish_key` later).
        :param make_current: sign with it by default from now on.
        """
        signing_key = SigningKey.generate(alg, kid=kid, published=publish)
        if any(k.kid == signing_key.kid for k in self._keys):
            raise ValueError(f"a signing key {signing_key.kid!r} exists already")
        self._keys.append(signing_key)
        if make_current:
            self._current_kid = signing_key.kid
        return signing_key.kid

    def publish_key(self, kid: str) -> None:
        """List key ``kid`` in ``/jwks.json``."""
        self.key(kid).published = True

    def retire_key(self, kid: str) -> None:
        """Drop key ``kid``: it is no longer published and no longer signs."""
        signing_key = self.key(kid)
        self._keys.remove(signing_key)
        if self._current_kid == kid:
            published = [k for k in self._keys if k.published]
            self._current_kid = published[0].kid if published else ""

    def rotate(self, alg: str | None = None) -> str:
        """Add a new published key that becomes current, and retire the current one.

        :returns: the new key's ``kid``.
        """
        old = self._current_kid
        new = self.add_key(alg or self.key(old).alg, make_current=True)
        self.retire_key(old)
        return new

    def _signing_key(self, kid: str | None, alg: str | None) -> SigningKey:
        if kid is not None:
            return self.key(kid)
        if alg is None:
            return self.key(self._current_kid)
        current = self.key(self._current_kid) if self._current_kid else None
        if current is not None and current.alg == alg:
            return current
        for signing_key in self._keys:
            if signing_key.published and signing_key.alg == alg:
                return signing_key
        raise KeyError(f"no published {alg} key; add one with add_key({alg!r})")

    # ------------------------------------------------------------------------------ tokens

    def token_claims(
        self,
        sub: str = "alice",
        *,
        claims: Mapping[str, Any] | None = None,
        issuer: str | None = None,
        audience: str | list[str] | None = None,
        expires_in: float = 300.0,
        not_before: float | None = None,
        issued_at: float | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The claims :meth:`issue_token` signs (see there)."""
        now = time.time()
        iat = int(now if issued_at is None else issued_at)
        body: dict[str, Any] = {
            "iss": self.issuer_url if issuer is None else issuer,
            "sub": sub,
            "aud": self.audience if audience is None else audience,
            "iat": iat,
            "exp": int(now + expires_in),
            "jti": secrets.token_urlsafe(12),
        }
        if not_before is not None:
            body["nbf"] = int(not_before)
        body.update(claims or {})
        body.update(extra)
        return body

    def issue_token(
        self,
        sub: str = "alice",
        *,
        claims: Mapping[str, Any] | None = None,
        alg: str | None = None,
        kid: str | None = None,
        issuer: str | None = None,
        audience: str | list[str] | None = None,
        expires_in: float = 300.0,
        not_before: float | None = None,
        issued_at: float | None = None,
        headers: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> str:
        """Sign an access token.

        :param sub: the subject.
        :param claims: further claims (``email``, ``groups``...); ``**extra`` adds more.
        :param alg: sign with a published key of this algorithm (the current key by default).
        :param kid: sign with this key, published or not.
        :param issuer: the ``iss`` claim (the issuer URL by default).
        :param audience: the ``aud`` claim, a string or a list (:attr:`audience` by default).
        :param expires_in: seconds from now to ``exp`` (negative for an expired token).
        :param not_before: the ``nbf`` claim, seconds since the epoch (absent by default).
        :param issued_at: the ``iat`` claim (now by default).
        :param headers: extra JOSE header parameters.
        """
        signing_key = self._signing_key(kid, alg)
        body = self.token_claims(
            sub,
            claims=claims,
            issuer=issuer,
            audience=audience,
            expires_in=expires_in,
            not_before=not_before,
            issued_at=issued_at,
            **extra,
        )
        header = {
            "typ": "at+jwt",
            "alg": signing_key.alg,
            "kid": signing_key.kid,
            **(headers or {}),
        }
        return _sign(header, body, signing_key.key)

    # ----------------------------------------------------------------------------- forgery

    def forge_alg_none(self, sub: str = "alice", **claims: Any) -> str:
        """A token with ``alg: none`` and no signature, naming the current key."""
        header = {"typ": "JWT", "alg": "none", "kid": self._current_kid}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SecurityWarning)
            return jwt.encode(header, self.token_claims(sub, **claims), None, algorithms=["none"])  # type: ignore[arg-type]

    def forge_hs256_with_public_key(self, sub: str = "alice", **claims: Any) -> str:
        """An HS256 token whose HMAC secret is the issuer's public key in PEM.

        The classic key-confusion attack: a verifier that lets the token choose the algorithm
        would check the HMAC with the public key it holds and accept. joserfc refuses to use a
        public key as an HMAC secret, so the MAC is computed here with the standard library.
        """
        signing_key = self.key(self._current_kid)
        header = {"typ": "JWT", "alg": "HS256", "kid": signing_key.kid}
        signing_input = (
            json_b64encode(header)
            + b"."
            + urlsafe_b64encode(json.dumps(self.token_claims(sub, **claims)).encode())
        )
        mac = hmac.new(signing_key.public_pem(), signing_input, hashlib.sha256).digest()
        return (signing_input + b"." + urlsafe_b64encode(mac)).decode()

    def forge_embedded_jwk(
        self, sub: str = "alice", *, kid: str | None = None, **claims: Any
    ) -> str:
        """A token signed by an attacker's key that carries that key in its ``jwk`` header.

        :param kid: the ``kid`` header (the attacker key's own by default; pass
            :attr:`current_kid` to impersonate the issuer's key).
        """
        attacker = SigningKey.generate("ES256")
        header = {"alg": "ES256", "kid": kid or attacker.kid, "jwk": attacker.public_jwk()}
        return _sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_jku(self, sub: str = "alice", **claims: Any) -> str:
        """A token whose ``jku`` header points at an attacker's JWK Set.

        The token is signed by an attacker's key that :attr:`untrusted_jwks_uri` publishes.
        """
        attacker = SigningKey.generate("ES256")
        self.untrusted_keys.append(attacker)
        header = {"alg": "ES256", "kid": attacker.kid, "jku": self.untrusted_jwks_uri}
        return _sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_x5u(self, sub: str = "alice", **claims: Any) -> str:
        """A token signed by an attacker's key, with an ``x5u`` header pointing elsewhere."""
        attacker = SigningKey.generate("ES256")
        self.untrusted_keys.append(attacker)
        header = {"alg": "ES256", "kid": attacker.kid, "x5u": self.untrusted_jwks_uri}
        return _sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_unknown_kid(self, sub: str = "alice", **claims: Any) -> str:
        """A well-formed token signed by a key the issuer never published."""
        stranger = SigningKey.generate("RS256")
        return _sign(
            {"alg": "RS256", "kid": stranger.kid}, self.token_claims(sub, **claims), stranger.key
        )

    # ----------------------------------------------------------------- authorization code

    def add_user(self, subject: str, **claims: Any) -> IdentityUser:
        """Register a user the authorization code flow can sign in (``login_hint=<subject>``)."""
        user = IdentityUser(subject, dict(claims))
        self.users[subject] = user
        return user

    def _user_for(self, login_hint: str | None) -> IdentityUser:
        if login_hint:
            for user in self.users.values():
                if login_hint in (user.subject, user.claims.get("email")):
                    return user
        return next(iter(self.users.values()))

    def _tokens_for(
        self, grant_subject: str, client_id: str, scope: str, nonce: str | None
    ) -> dict[str, Any]:
        user = self.users.get(grant_subject) or IdentityUser(grant_subject)
        access = self.issue_token(
            user.subject,
            claims={**user.claims, "client_id": client_id, "scope": scope},
            expires_in=self.token_lifetime,
        )
        signing_key = self.key(self._current_kid)
        id_claims: dict[str, Any] = {
            **user.claims,
            "azp": client_id,
            "at_hash": token_hash(access, signing_key.alg),
        }
        if nonce:
            id_claims["nonce"] = nonce
        id_token = self.issue_token(
            user.subject,
            claims=id_claims,
            audience=client_id,
            expires_in=self.token_lifetime,
            headers={"typ": "JWT"},
        )
        body: dict[str, Any] = {
            "access_token": access,
            "id_token": id_token,
            "token_type": "Bearer",
            "expires_in": int(self.token_lifetime),
            "scope": scope,
        }
        if "offline_access" in scope.split():
            refresh = secrets.token_urlsafe(32)
            self._refresh[refresh] = _RefreshGrant(client_id, user.subject, scope)
            body["refresh_token"] = refresh
        return body


def token_hash(token: str, alg: str) -> str:
    """``at_hash`` of ``token`` for a key of ``alg`` (OpenID Connect Core §3.1.3.6).

    The left half of the hash the signature algorithm uses, base64url without padding
    (SHA-512 for EdDSA over Ed25519).
    """
    bits = alg[-3:] if alg[-3:] in {"256", "384", "512"} else "512"
    digest = hashlib.new(f"sha{bits}", token.encode("ascii")).digest()
    return urlsafe_b64encode(digest[: len(digest) // 2]).decode("ascii")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
        idp._codes[code] = _AuthorizationCode(
            client_id=query["client_id"],
            redirect_uri=redirect_uri,
            code_challenge=query["code_challenge"],
            subject=subject or idp._user_for(query.get("login_hint")).subject,
            scope=query.get("scope", "openid"),
            nonce=query.get("nonce"),
            expires_at=time.monotonic() + _CODE_LIFETIME,
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
    else:
        return _oauth_error("unsupported_grant_type", "use authorization_code or refresh_token")
    return web.json_response(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


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


class DevIdentityProvider(TestIdentityProvider):
    """The identity provider ``deskpool dev`` runs: fixed keys, kept in a file.

    The first start creates one RS256 key and writes it (private, mode 0600) to ``key_file``;
    later starts read it back, so tokens issued before a restart still verify.

    :param key_file: where the private JWK Set is kept.
    :param audience: the audience of access tokens (``AUTH_OIDC_AUDIENCE``).
    :param users: users the sign-in page offers; a development administrator and a desktop
        user by default.
    :param token_lifetime: lifetime in seconds of tokens from the sign-in flow.
    :param allow_remote: allow listening on an address that is not loopback.
    """

    def __init__(
        self,
        key_file: Path | str,
        *,
        audience: str = DEFAULT_AUDIENCE,
        users: Iterable[IdentityUser] | None = None,
        token_lifetime: float = 8 * 3600.0,
        allow_remote: bool = False,
    ) -> None:
        self.key_file = Path(key_file)
        super().__init__(
            audience=audience,
            keys=self._load_or_create_keys(self.key_file),
            users=users,
            token_lifetime=token_lifetime,
            allow_remote=allow_remote,
            sign_in_page=True,
        )
        if users is None:
            self.add_user(
                "dev-user",
                email="user@deskpool.test",
                email_verified=True,
                name="Development Desktop User",
                preferred_username="user",
                groups=["deskpool-users"],
            )

    @staticmethod
    def _load_or_create_keys(path: Path) -> list[SigningKey]:
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            return [SigningKey(import_key(item)) for item in data["keys"]]
        signing_key = SigningKey.generate("RS256", kid="deskpool-dev-1")
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"keys": [signing_key.key.as_dict(private=True)]}, handle)
        return [signing_key]
