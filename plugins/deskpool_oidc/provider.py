"""The OIDC auth provider: verifies bearer access tokens against an OpenID Connect issuer.

At start it reads the issuer's discovery document (``/.well-known/openid-configuration``) and
its JWK Set; while the issuer cannot be reached it keeps retrying with exponential backoff and
:meth:`OidcAuthProvider.verify` answers 503. A token is accepted only when:

- it is a JWS in compact serialization whose ``alg`` is on the allow-list
  (:data:`ALLOWED_ALGORITHMS`: no ``none``, no HMAC) and whose header carries none of the
  parameters that would let the token choose its own key (``jwk``, ``jku``, ``x5u``, ``x5c``)
  or change how it is read (``crit``, ``b64``);
- its ``kid`` names a key of the issuer's JWK Set whose type, curve and ``alg`` fit the
  algorithm; an unknown ``kid`` refetches the JWK Set at most once per cooldown, so random
  key ids cannot make the service flood the issuer;
- the signature verifies (joserfc does the cryptography) and ``iss``, ``aud`` (a string or a
  list), ``exp``, ``nbf`` and ``iat`` hold, with a small clock skew;
- it is an access token, not an ID token: a token typed ``at+jwt`` (RFC 9068) is one; a token
  explicitly typed as another kind of JWT (``logout+jwt``, ``dpop+jwt``...; RFC 8725 §3.11) is
  not, and neither is one that carries what only ID tokens carry (:data:`ID_TOKEN_CLAIMS`:
  ``nonce``, ``at_hash``, ``c_hash``, ``s_hash``) or an issuer's own ID-token marker (Keycloak's
  ``typ: ID`` claim); a token neither typed ``at+jwt`` nor carrying an access-token claim
  (:data:`ACCESS_TOKEN_CLAIMS`: ``scope``, ``scp``, ``client_id``, ``roles``) is not one either
  (an ID token of a code flow without ``nonce`` and ``at_hash``). An ID token is issued *to a
  client* as proof of a sign-in, and its audience is that client, not this API; accepting it
  would let anything that ever held a console ID token call the API.
  ``AUTH_OIDC_ACCEPT_ID_TOKENS`` turns that refusal off for issuers whose access tokens are ID
  tokens (Dex), see ``docs/operators/identity.md``.

A verified token is cached in the process until it expires, keyed by the SHA-256 of the token,
so verifying it again costs a hash and a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from joserfc import jws
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey, import_key
from joserfc.jwt import JWTClaimsRegistry

from deskpool.auth import AuthProvider, AuthProviderState, BrowserSignIn, VerifiedToken
from deskpool.errors import AuthNotConfigured, ServiceUnavailable, Unauthenticated
from deskpool_oidc.token_types import not_an_access_token

log = logging.getLogger(__name__)

#: Signature algorithms a token may use. Everything else (``none``, HS256/384/512, ...) fails.
ALLOWED_ALGORITHMS: frozenset[str] = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"}
)

#: Header parameters that would let a token bring or point at its own key, or change how its
#: payload is read; a token carrying any of them is refused before a key is looked up.
FORBIDDEN_HEADER_PARAMETERS: frozenset[str] = frozenset({"jwk", "jku", "x5u", "x5c", "crit", "b64"})

#: RSA keys shorter than this are ignored when the JWK Set is read.
MIN_RSA_KEY_BITS = 2048

#: Largest discovery document or JWK Set read, in bytes.
MAX_DOCUMENT_BYTES = 1024 * 1024

_DISCOVERY_PATH = "/.well-known/openid-configuration"


@dataclass
class OidcSettings:
    """How the provider verifies and how it treats the issuer.

    :param issuer_url: ``AUTH_OIDC_ISSUER_URL``; empty means not configured.
    :param audience: ``AUTH_OIDC_AUDIENCE``; empty means not configured.
    :param groups_claim: ``AUTH_OIDC_GROUPS_CLAIM`` (a dot-path).
    :param roles_claim: ``AUTH_OIDC_ROLES_CLAIM`` (a dot-path).
    :param clock_skew: seconds of tolerance on ``exp``, ``nbf`` and ``iat``.
    :param jwks_refresh_cooldown: least seconds between two JWK Set fetches caused by
        unknown key ids.
    :param jwks_max_age: seconds after which the JWK Set is refetched in the background, so
        keys the issuer withdrew stop being trusted.
    :param http_timeout: seconds allowed for one request to the issuer.
    :param start_timeout: how long :meth:`OidcAuthProvider.start` waits for the first contact
        with the issuer before it returns and lets the retries run in the background.
    :param retry_initial: first delay between discovery attempts, in seconds.
    :param retry_max: largest delay between discovery attempts, in seconds.
    :param cache_size: most verified tokens kept in the cache.
    :param accept_id_tokens: ``AUTH_OIDC_ACCEPT_ID_TOKENS``: do not refuse tokens that look like
        ID tokens (for issuers whose access tokens are ID tokens).
    :param browser_client_id: the client a browser page signs in as (``/docs``): the console's.
    :param browser_scopes: the scopes that page asks for.
    """

    issuer_url: str
    audience: str
    groups_claim: str = "groups"
    roles_claim: str = "roles"
    clock_skew: float = 60.0
    jwks_refresh_cooldown: float = 60.0
    jwks_max_age: float = 3600.0
    http_timeout: float = 10.0
    start_timeout: float = 5.0
    retry_initial: float = 1.0
    retry_max: float = 60.0
    cache_size: int = 10_000
    accept_id_tokens: bool = False
    browser_client_id: str = ""
    browser_scopes: str = "openid"

    @property
    def configured(self) -> bool:
        """Whether both the issuer and the audience are set (SPEC §5.1.4)."""
        return bool(self.issuer_url.strip() and self.audience.strip())


@dataclass
class OidcStats:
    """Counters of what the provider did, for metrics and tests."""

    discovery_attempts: int = 0
    jwks_fetches: int = 0
    cache_hits: int = 0
    verified: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class _CachedToken:
    identity: VerifiedToken
    kid: str
    valid_until: float


class _IssuerError(Exception):
    """The issuer could not be reached or answered something unusable (message is safe)."""


class OidcAuthProvider(AuthProvider):
    """Verifies OIDC access tokens (see the module documentation).

    :param settings: what to verify against.
    :param now: wall-clock time in seconds since the epoch (token lifetimes).
    :param monotonic: a monotonic clock in seconds (cooldowns, key age).
    """

    name = "oidc"

    def __init__(
        self,
        settings: OidcSettings,
        *,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.stats = OidcStats()
        self._now = now
        self._monotonic = monotonic
        self._state = (
            AuthProviderState.STOPPED if settings.configured else AuthProviderState.NOT_CONFIGURED
        )
        self._issuer = settings.issuer_url.strip()
        self._audience = settings.audience.strip()
        self._jwks_uri = ""
        self._keys: dict[str, Key] = {}
        self._jwks_fetched_at: float | None = None
        self._jwks_attempted_at: float | None = None
        self._jwks_generation = 0
        self._kid_refresh_at: float | None = None
        self._jwks_lock = asyncio.Lock()
        self._cache: dict[bytes, _CachedToken] = {}
        self._session: aiohttp.ClientSession | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._retry_delay = settings.retry_initial
        self._next_attempt_at: float | None = None
        self.last_error: str | None = None
        self._registry = jws.JWSRegistry(
            algorithms=sorted(ALLOWED_ALGORITHMS), strict_check_header=False
        )

    # ---------------------------------------------------------------------------- lifecycle

    @property
    def state(self) -> AuthProviderState:
        """Where the provider is in its life."""
        return self._state

    @property
    def issuer(self) -> str:
        """The issuer tokens must name (from discovery once it succeeded)."""
        return self._issuer

    @property
    def key_ids(self) -> frozenset[str]:
        """The ``kid`` of every key currently trusted."""
        return frozenset(self._keys)

    def not_configured_error(self) -> AuthNotConfigured:
        """What protected routes answer while the issuer or the audience is unset."""
        return AuthNotConfigured(
            "Protected operations are unavailable until AUTH_OIDC_ISSUER_URL and "
            "AUTH_OIDC_AUDIENCE are both set."
        )

    def browser_sign_in(self) -> BrowserSignIn | None:
        """Sign-in for ``/docs``: the issuer's discovery document and the console's client.

        ``None`` while no issuer or no client is configured.
        """
        issuer = self.settings.issuer_url.strip().rstrip("/")
        client_id = self.settings.browser_client_id.strip()
        if not issuer or not client_id:
            return None
        parts = urlsplit(issuer)
        origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
        return BrowserSignIn(
            discovery_url=issuer + _DISCOVERY_PATH,
            client_id=client_id,
            scopes=self.settings.browser_scopes or "openid",
            origins=(origin,) if origin else (),
        )

    async def start(self) -> None:
        """Open the HTTP session and contact the issuer; never raises when it is unreachable.

        Waits up to ``start_timeout`` for the first attempt, then leaves the retries to a
        background task.
        """
        if self._state is AuthProviderState.NOT_CONFIGURED:
            log.warning(
                "AUTH_OIDC_ISSUER_URL and AUTH_OIDC_AUDIENCE are not both set: "
                "protected API routes answer 503"
            )
            return
        if self._state is not AuthProviderState.STOPPED:
            raise RuntimeError(
                f"the oidc auth provider cannot start from state {self._state.value}"
            )
        self._state = AuthProviderState.STARTING
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.settings.http_timeout),
            headers={"Accept": "application/json"},
            trust_env=True,
        )
        self._discovery_task = asyncio.create_task(
            self._discover_until_ready(), name="oidc-discovery"
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt.wait(), self.settings.start_timeout)

    async def close(self) -> None:
        """Stop the retries and background refreshes and close the HTTP session."""
        if self._state is AuthProviderState.NOT_CONFIGURED:
            return
        self._state = AuthProviderState.CLOSED
        tasks = [t for t in (self._discovery_task, self._refresh_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._cache.clear()

    async def wait_until_ready(self) -> None:
        """Return once the issuer has been reached (for tests and startup ordering)."""
        await self._ready.wait()

    # ------------------------------------------------------------------------------ discovery

    async def _discover_until_ready(self) -> None:
        while self._state in (AuthProviderState.STARTING, AuthProviderState.UNAVAILABLE):
            self.stats.discovery_attempts += 1
            try:
                await self._discover()
            except _IssuerError as error:
                self.last_error = str(error)
            except Exception as error:  # a bug must not end the retries: log it and go on
                log.exception("unexpected failure while contacting the OIDC issuer")
                self.last_error = f"unexpected {type(error).__name__}"
            else:
                break
            self._state = AuthProviderState.UNAVAILABLE
            delay = self._retry_delay * random.uniform(0.8, 1.2)  # jitter, not a secret
            self._retry_delay = min(self._retry_delay * 2, self.settings.retry_max)
            self._next_attempt_at = self._monotonic() + delay
            log.warning(
                "OIDC issuer %s cannot be used yet (%s); retrying in %.1fs",
                self.settings.issuer_url,
                self.last_error,
                delay,
            )
            self._first_attempt.set()
            await asyncio.sleep(delay)
        else:
            return  # closed while retrying
        self.last_error = None
        self._state = AuthProviderState.READY
        self._ready.set()
        self._first_attempt.set()
        log.info("OIDC issuer %s ready with %d keys", self._issuer, len(self._keys))

    async def _discover(self) -> None:
        configured = self.settings.issuer_url.strip()
        document = await self._get_json(configured.rstrip("/") + _DISCOVERY_PATH)
        issuer = document.get("issuer")
        if not isinstance(issuer, str) or issuer.rstrip("/") != configured.rstrip("/"):
            # OIDC Discovery §4.3: the issuer in the document must be the one configured.
            raise _IssuerError(f"discovery names issuer {issuer!r}, not {configured!r}")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise _IssuerError("discovery has no usable jwks_uri")
        self._issuer = issuer
        self._jwks_uri = jwks_uri
        await self._fetch_jwks()

    async def _get_json(self, url: str) -> dict[str, Any]:
        if self._session is None:
            raise _IssuerError("the provider is not started")
        try:
            async with self._session.get(url, allow_redirects=False) as response:
                if response.status != 200:
                    raise _IssuerError(f"GET {url} answered HTTP {response.status}")
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise _IssuerError(f"GET {url} failed: {type(error).__name__}: {error}") from None
        if len(body) > MAX_DOCUMENT_BYTES:
            raise _IssuerError(f"GET {url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        try:
            document = json.loads(body)
        except ValueError:
            raise _IssuerError(f"GET {url} did not answer JSON") from None
        if not isinstance(document, dict):
            raise _IssuerError(f"GET {url} did not answer a JSON object")
        return document

    async def _fetch_jwks(self) -> None:
        self._jwks_generation += 1
        self._jwks_attempted_at = self._monotonic()
        self.stats.jwks_fetches += 1
        document = await self._get_json(self._jwks_uri)
        items = document.get("keys")
        if not isinstance(items, list):
            raise _IssuerError("the JWK Set has no keys array")
        keys: dict[str, Key] = {}
        for item in items:
            key = _signature_key(item)
            if key is not None:
                keys[str(key.kid)] = key
        if not keys:
            raise _IssuerError("the JWK Set has no usable signature key")
        withdrawn = self._keys.keys() - keys.keys()
        self._keys = keys
        self._jwks_fetched_at = self._monotonic()
        if withdrawn:
            # Tokens verified with a key the issuer no longer publishes are not trusted further.
            self._cache = {h: c for h, c in self._cache.items() if c.kid not in withdrawn}

    async def _refresh_jwks(self, generation: int, *, for_unknown_kid: bool) -> None:
        """Refetch the JWK Set, unless another caller fetched it since ``generation``.

        :param for_unknown_kid: the refetch is caused by a token's unknown ``kid``: it happens
            at most once per ``jwks_refresh_cooldown``, whatever the tokens say.
        """
        async with self._jwks_lock:
            if self._jwks_generation != generation:
                return  # fetched while we waited for the lock: look at the new keys
            if for_unknown_kid:
                if not self._kid_refresh_allowed():
                    return
                self._kid_refresh_at = self._monotonic()
            try:
                await self._fetch_jwks()
            except _IssuerError as error:
                log.warning("refreshing the JWK Set of %s failed: %s", self._issuer, error)

    def _kid_refresh_allowed(self) -> bool:
        last = self._kid_refresh_at
        return last is None or self._monotonic() - last >= self.settings.jwks_refresh_cooldown

    def _refresh_in_background_if_old(self) -> None:
        now = self._monotonic()
        fetched, attempted = self._jwks_fetched_at, self._jwks_attempted_at
        if fetched is None or now - fetched < self.settings.jwks_max_age:
            return
        if attempted is not None and now - attempted < self.settings.jwks_refresh_cooldown:
            return  # the last attempt failed recently; do not hammer the issuer
        if self._refresh_task is not None and not self._refresh_task.done():
            return
        self._refresh_task = asyncio.create_task(
            self._refresh_jwks(self._jwks_generation, for_unknown_kid=False),
            name="oidc-jwks-refresh",
        )

    # ------------------------------------------------------------------------------- verify

    async def verify(self, token: str) -> VerifiedToken:
        """Verify ``token`` and return the identity it proves (see the module documentation).

        :raises Unauthenticated: for any token that is not acceptable.
        :raises ServiceUnavailable: while the issuer has not been reached.
        :raises AuthNotConfigured: while the issuer or audience is not configured.
        """
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._cache.get(digest)
        if cached is not None and cached.valid_until > self._now():
            self.stats.cache_hits += 1
            return cached.identity
        if self._state is not AuthProviderState.READY:
            raise self._not_ready()
        try:
            identity, kid = await self._verify_uncached(token)
        except Unauthenticated:
            self.stats.rejected += 1
            raise
        self.stats.verified += 1
        self._remember(digest, identity, kid)
        return identity

    def _not_ready(self) -> ServiceUnavailable:
        if self._state is AuthProviderState.NOT_CONFIGURED:
            return self.not_configured_error()
        headers: dict[str, str] = {}
        if self._next_attempt_at is not None:
            wait = max(1, round(self._next_attempt_at - self._monotonic()))
            headers["Retry-After"] = str(wait)
        return ServiceUnavailable(
            "The identity provider cannot be reached yet; tokens cannot be verified.",
            headers=headers,
        )

    async def _verify_uncached(self, token: str) -> tuple[VerifiedToken, str]:
        try:
            signed = jws.extract_compact(token.encode("ascii"), registry=self._registry)
        except (JoseError, ValueError, UnicodeError):
            raise Unauthenticated("The bearer token is not a well-formed JWT.") from None
        header = signed.headers()
        alg = header.get("alg") if isinstance(header, dict) else None
        if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
            raise Unauthenticated("The token's signature algorithm is not accepted.")
        if FORBIDDEN_HEADER_PARAMETERS.intersection(header):
            raise Unauthenticated("The token's header carries parameters that are not accepted.")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("The token's key id is invalid.")
        key = await self._key_for(kid)
        try:
            if alg == "EdDSA":
                # joserfc warns that RFC 9864 deprecates the name. Only here: entering
                # catch_warnings copies the process's filters, at every cold sign-in.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", SecurityWarning)
                    valid = jws.validate_compact(signed, key, registry=self._registry)
            else:
                valid = jws.validate_compact(signed, key, registry=self._registry)
        except (JoseError, ValueError):
            raise Unauthenticated("The token's key does not fit its algorithm.") from None
        if not valid:
            raise Unauthenticated("The token's signature is invalid.")
        claims = _payload_claims(signed.payload)
        self._check_claims(claims)
        if not self.settings.accept_id_tokens:
            refusal = not_an_access_token(header, claims)
            if refusal is not None:
                raise Unauthenticated(refusal)
        self._refresh_in_background_if_old()
        identity = VerifiedToken.from_claims(
            claims, groups_claim=self.settings.groups_claim, roles_claim=self.settings.roles_claim
        )
        return identity, str(key.kid)

    async def _key_for(self, kid: str | None) -> Key:
        if kid is None:
            if len(self._keys) == 1:
                return next(iter(self._keys.values()))
            raise Unauthenticated("The token has no key id.")
        key = self._keys.get(kid)
        if key is None and self._kid_refresh_allowed():
            await self._refresh_jwks(self._jwks_generation, for_unknown_kid=True)
            key = self._keys.get(kid)
        if key is None:
            raise Unauthenticated("The token is signed with an unknown key.")
        return key

    def _check_claims(self, claims: dict[str, Any]) -> None:
        registry = JWTClaimsRegistry(
            now=int(self._now()),
            leeway=int(self.settings.clock_skew),
            iss={"essential": True, "value": self._issuer},
            aud={"essential": True, "value": self._audience},
            sub={"essential": True},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as error:
            claim = getattr(error, "claim", None) or ""
            raise Unauthenticated(_claim_message(str(claim), error)) from None
        try:
            float(claims["exp"])
        except OverflowError:
            raise Unauthenticated("The token's exp claim is invalid.") from None

    def _remember(self, digest: bytes, identity: VerifiedToken, kid: str) -> None:
        cache = self._cache
        limit = self.settings.cache_size
        if limit <= 0:
            return
        if len(cache) >= limit:
            now = self._now()
            kept = {h: c for h, c in cache.items() if c.valid_until > now}
            if len(kept) > limit * 9 // 10:
                # Mostly live tokens: drop the oldest tenth (dicts keep insertion order).
                surplus = len(kept) - limit * 9 // 10
                for stale in list(kept)[:surplus]:
                    del kept[stale]
            self._cache = cache = kept
        cache[digest] = _CachedToken(identity, kid, identity.expires_at + self.settings.clock_skew)


def _claim_message(claim: str, error: JoseError) -> str:
    if error.error == "expired_token":
        return "The token has expired."
    if error.error == "missing_claim":
        return f"The token lacks required claims: {claim}."
    messages = {
        "iss": "The token was issued by another issuer.",
        "aud": "The token is not meant for this service (audience).",
        "nbf": "The token is not valid yet.",
        "iat": "The token was issued in the future.",
    }
    return messages.get(claim, f"The token's {claim or 'claims'} claim is invalid.")


def _payload_claims(payload: bytes | None) -> dict[str, Any]:
    try:
        claims = json.loads(payload or b"")
    except ValueError:
        raise Unauthenticated("The token's payload is not JSON.") from None
    if not isinstance(claims, dict):
        raise Unauthenticated("The token's payload is not a JSON object.")
    return claims


def _signature_key(item: object) -> Key | None:
    """Import one JWK of the issuer's set if it can verify signatures; ``None`` otherwise.

    A key without a ``kid`` is named by its RFC 7638 thumbprint (a token without a ``kid`` is
    verified with the only key of the set, if there is only one).
    """
    if not isinstance(item, Mapping) or not isinstance(item.get("kid", ""), str):
        return None
    if item.get("kty") not in ("RSA", "EC", "OKP") or item.get("use", "sig") != "sig":
        return None  # symmetric keys and encryption keys never verify an access token
    alg = item.get("alg")
    if alg is not None and (not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS):
        return None
    public = {k: v for k, v in item.items() if k not in ("d", "p", "q", "dp", "dq", "qi", "oth")}
    try:
        key = import_key(public)
    except (JoseError, ValueError, TypeError, KeyError) as error:
        log.warning("ignoring JWK %r of the issuer: %s", item.get("kid"), error)
        return None
    if isinstance(key, RSAKey) and key.raw_value.key_size < MIN_RSA_KEY_BITS:
        log.warning(
            "ignoring JWK %r: RSA key shorter than %d bits", item.get("kid"), MIN_RSA_KEY_BITS
        )
        return None
    if not isinstance(key, RSAKey | ECKey | OKPKey):
        return None
    key.ensure_kid()
    return key
