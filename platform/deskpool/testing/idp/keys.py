"""The identity provider's signing keys: creating them, signing with them, the key ring.

:class:`SigningKey` is one private key (RS256, RS384, RS512, PS256, ES256, ES384 or EdDSA,
created with joserfc). :class:`KeyRing` holds the issuer's keys: added unpublished or
published, retired, rotated, and the current one that signs by default.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, Key, KeyParameters, OctKey, OKPKey, RSAKey
from joserfc.util import urlsafe_b64encode

__all__ = ["SIGNING_ALGORITHMS", "KeyRing", "SigningKey", "sign", "token_hash"]

#: Signing algorithms the identity provider can create keys for.
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")


#: How many RSA key pairs one process makes before it reuses them (see :func:`_rsa_key`).
RSA_PAIRS_PER_PROCESS = 8

_rsa_pairs: list[RSAKey] = []
_rsa_turn = itertools.count()


def _rsa_key(parameters: KeyParameters) -> RSAKey:
    """An RSA 2048 key with ``parameters`` (its ``kid``, ``alg`` and ``use``).

    A process makes :data:`RSA_PAIRS_PER_PROCESS` key pairs, then takes them again in turn
    under the new key id: finding two 1024-bit primes took the test suite's processes about a
    minute of CPU in all (50 to 150 ms a key, a key for every identity provider a test makes).
    A key is told apart by its ``kid``, which is always new: a token names the key that signed
    it, and a verifier that does not know that ``kid`` refuses the token, whatever the pair.
    """
    turn = next(_rsa_turn)
    if turn < RSA_PAIRS_PER_PROCESS:
        pair = RSAKey.generate_key(2048)
        _rsa_pairs.append(pair)
    else:
        pair = _rsa_pairs[turn % RSA_PAIRS_PER_PROCESS]
    return RSAKey.import_key(pair.as_dict(private=True), parameters=parameters)


def generate_private_key(alg: str, kid: str) -> Key:
    parameters: KeyParameters = {"kid": kid, "use": "sig", "alg": alg}
    if alg.startswith(("RS", "PS")):
        return _rsa_key(parameters)
    if alg == "ES256":
        return ECKey.generate_key("P-256", parameters=parameters)
    if alg == "ES384":
        return ECKey.generate_key("P-384", parameters=parameters)
    if alg == "EdDSA":
        return OKPKey.generate_key("Ed25519", parameters=parameters)
    raise ValueError(f"cannot create a signing key for {alg!r}; use one of {SIGNING_ALGORITHMS}")


def sign(header: Mapping[str, Any], claims: Mapping[str, Any], key: Key) -> str:
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
        return cls(generate_private_key(alg, kid or secrets.token_urlsafe(12)), published)


def token_hash(token: str, alg: str) -> str:
    """``at_hash`` of ``token`` for a key of ``alg`` (OpenID Connect Core §3.1.3.6).

    The left half of the hash the signature algorithm uses, base64url without padding
    (SHA-512 for EdDSA over Ed25519).
    """
    bits = alg[-3:] if alg[-3:] in {"256", "384", "512"} else "512"
    digest = hashlib.new(f"sha{bits}", token.encode("ascii")).digest()
    return urlsafe_b64encode(digest[: len(digest) // 2]).decode("ascii")


class KeyRing:
    """The issuer's signing keys, and which one signs when no ``kid`` or ``alg`` is asked for.

    :param keys: the signing keys; one new RS256 and one new ES256 key when omitted. The very
        first is the current key.
    """

    def __init__(self, keys: Iterable[SigningKey] | None = None) -> None:
        self._keys: list[SigningKey] = list(keys) if keys is not None else []
        if not self._keys:
            self._keys = [SigningKey.generate("RS256"), SigningKey.generate("ES256")]
        self._current_kid = self._keys[0].kid

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
