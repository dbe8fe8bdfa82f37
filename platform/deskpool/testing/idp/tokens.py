"""Issuing tokens: access tokens signed with any claims and lifetimes, and forged ones.

:class:`TokenIssuer` signs access tokens typed ``at+jwt`` (RFC 9068) with the keys of its
:class:`~deskpool.testing.idp.keys.KeyRing`; the ``forge_*`` methods build the tokens an attacker
would send (``alg: none``, HS256 keyed with the public key, an embedded ``jwk``, a ``jku`` or
``x5u`` pointing elsewhere, a key the issuer never published).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.util import json_b64encode, urlsafe_b64encode

from deskpool.testing.idp.keys import KeyRing, SigningKey, sign

__all__ = ["TokenIssuer"]


class TokenIssuer(KeyRing):
    """Signs access tokens for :attr:`audience` as :attr:`issuer_url`.

    :param audience: the ``aud`` of issued access tokens unless a call says otherwise.
    :param keys: the signing keys (see :class:`~deskpool.testing.idp.keys.KeyRing`).
    """

    def __init__(self, audience: str, keys: Iterable[SigningKey] | None = None) -> None:
        super().__init__(keys)
        self.audience = audience
        #: Keys an attacker controls, served at ``/untrusted/jwks.json`` (a ``jku`` target).
        self.untrusted_keys: list[SigningKey] = []

    @property
    def issuer_url(self) -> str:
        """The ``iss`` of issued tokens."""
        raise NotImplementedError

    @property
    def untrusted_jwks_uri(self) -> str:
        """Where :attr:`untrusted_keys` are served (what a ``jku`` attack points at)."""
        return self.issuer_url + "/untrusted/jwks.json"

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
        return sign(header, body, signing_key.key)

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
        return sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_jku(self, sub: str = "alice", **claims: Any) -> str:
        """A token whose ``jku`` header points at an attacker's JWK Set.

        The token is signed by an attacker's key that :attr:`untrusted_jwks_uri` publishes.
        """
        attacker = SigningKey.generate("ES256")
        self.untrusted_keys.append(attacker)
        header = {"alg": "ES256", "kid": attacker.kid, "jku": self.untrusted_jwks_uri}
        return sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_x5u(self, sub: str = "alice", **claims: Any) -> str:
        """A token signed by an attacker's key, with an ``x5u`` header pointing elsewhere."""
        attacker = SigningKey.generate("ES256")
        self.untrusted_keys.append(attacker)
        header = {"alg": "ES256", "kid": attacker.kid, "x5u": self.untrusted_jwks_uri}
        return sign(header, self.token_claims(sub, **claims), attacker.key)

    def forge_unknown_kid(self, sub: str = "alice", **claims: Any) -> str:
        """A well-formed token signed by a key the issuer never published."""
        stranger = SigningKey.generate("RS256")
        return sign(
            {"alg": "RS256", "kid": stranger.kid}, self.token_claims(sub, **claims), stranger.key
        )

    # ----------------------------------------------------------------- authorization code
