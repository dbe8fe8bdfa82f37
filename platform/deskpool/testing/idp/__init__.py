"""An in-process OpenID Connect identity provider for tests and for ``deskpool dev``.

:class:`TestIdentityProvider` is a real OIDC issuer on the loopback interface (an aiohttp server
on a random port). It serves what a verifier reads from an issuer, over real HTTP:

- ``/.well-known/openid-configuration`` (OIDC Discovery 1.0) and ``/jwks.json`` (RFC 7517),
  with request counters so tests can check how often a verifier fetched them;
- the authorization code flow with PKCE (``/authorize``, ``/token``, ``/userinfo``,
  ``/logout``), signing in a registered user at once, without a form, so a browser (the
  console, the ``/docs`` page) can sign in against it unattended;
- the client credentials grant at ``/token`` for clients registered with
  :meth:`TestIdentityProvider.add_client`: their access tokens name the client as ``sub`` and
  ``client_id`` and carry no claim of a person, as RFC 9068 §2.2 describes a token obtained
  without a resource owner.

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

The package is cut along its seams: :mod:`.keys` (signing keys and the key ring),
:mod:`.tokens` (issuing and forging tokens), :mod:`.server` (the HTTP endpoints) and this
module (the issuer's lifecycle, its users and the tokens of a sign-in).

:class:`DevIdentityProvider` is the same issuer with fixed keys kept in a file, so the tokens
of a development sign-in stay valid across restarts of ``deskpool dev``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from joserfc.jwk import import_key

from deskpool.config import is_loopback_host
from deskpool.testing.idp.keys import SIGNING_ALGORITHMS, SigningKey, token_hash
from deskpool.testing.idp.server import (
    AuthorizationCode,
    IdentityClient,
    RefreshGrant,
    create_app,
)
from deskpool.testing.idp.tokens import TokenIssuer

__all__ = [
    "DEFAULT_AUDIENCE",
    "DEFAULT_CLIENT_ID",
    "SIGNING_ALGORITHMS",
    "DevIdentityProvider",
    "IdentityClient",
    "IdentityUser",
    "SigningKey",
    "TestIdentityProvider",
    "token_hash",
]

#: The audience access tokens are issued for unless a test says otherwise: the API's own, not
#: a client id (the console signs in as :data:`DEFAULT_CLIENT_ID`).
DEFAULT_AUDIENCE = "deskpool-api"
#: The client id the console (and ``/docs``) signs in as by default.
DEFAULT_CLIENT_ID = "deskpool-console"


@dataclass
class IdentityUser:
    """A user the identity provider signs in through the authorization code flow.

    :param subject: the ``sub`` claim.
    :param claims: further claims of its tokens (``email``, ``name``, ``groups``...).
    """

    subject: str
    claims: dict[str, Any] = field(default_factory=dict)


class TestIdentityProvider(TokenIssuer):
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
        super().__init__(audience, keys)
        self.allow_remote = allow_remote
        #: Whether ``/authorize`` shows a page to choose the user (see :mod:`.idp_signin`).
        self.sign_in_page = sign_in_page
        #: Browser sessions of the sign-in page: session id to subject.
        self.browser_sessions: dict[str, str] = {}
        self.issuer_path = "/" + issuer_path.strip("/") if issuer_path.strip("/") else ""
        self.token_lifetime = token_lifetime
        self.users: dict[str, IdentityUser] = {}
        #: Clients of the client credentials grant, by client id.
        self.clients: dict[str, IdentityClient] = {}
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
        self._codes: dict[str, AuthorizationCode] = {}
        self._refresh: dict[str, RefreshGrant] = {}
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
        if not self.allow_remote and not is_loopback_host(host):
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
        runner = web.AppRunner(create_app(self), access_log=None)
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
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": algorithms,
            "scopes_supported": ["openid", "profile", "email", "groups", "offline_access"],
            "token_endpoint_auth_methods_supported": [
                "none",
                "client_secret_basic",
                "client_secret_post",
            ],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "iss", "aud", "exp", "iat", "email", "name", "groups"],
        }

    # -------------------------------------------------------------------------------- keys

    def add_user(self, subject: str, **claims: Any) -> IdentityUser:
        """Register a user the authorization code flow can sign in (``login_hint=<subject>``)."""
        user = IdentityUser(subject, dict(claims))
        self.users[subject] = user
        return user

    def add_client(self, client_id: str, secret: str | None = None, **claims: Any) -> str:
        """Register a client of the client credentials grant; its secret (new when omitted)."""
        secret = secret or secrets.token_urlsafe(24)
        self.clients[client_id] = IdentityClient(client_id, secret, dict(claims))
        return secret

    def client_token(self, client_id: str, *, scope: str = "", **claims: Any) -> str:
        """An access token as the client credentials grant issues it to ``client_id``.

        Its ``sub`` and ``client_id`` are the client's id (RFC 9068 §2.2); no email, name or
        other claim of a person.
        """
        return self.issue_token(
            client_id,
            claims={**claims, "client_id": client_id, "scope": scope},
            expires_in=self.token_lifetime,
        )

    def _client_tokens(self, client: IdentityClient, scope: str) -> dict[str, Any]:
        access = self.client_token(client.client_id, scope=scope, **client.claims)
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": int(self.token_lifetime),
            "scope": scope,
        }

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
            self._refresh[refresh] = RefreshGrant(client_id, user.subject, scope)
            body["refresh_token"] = refresh
        return body


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
