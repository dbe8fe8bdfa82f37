"""The authentication contract: what an auth provider verifies and what it answers.

A protected API call carries ``Authorization: Bearer <access token>`` (SPEC §5.1). The API reads
the token with :func:`bearer_token_from_header` and hands it to the process's
:class:`AuthProvider` (chosen by ``AUTH_PROVIDER``, registered through
``deskpool_register_auth_providers``), which either returns a :class:`VerifiedToken` or raises:

- :class:`deskpool.errors.Unauthenticated` (401, with the ``WWW-Authenticate`` challenge) for a
  missing, malformed, forged, expired or otherwise unacceptable token;
- :class:`deskpool.errors.ServiceUnavailable` (503) while the provider cannot verify anything yet
  (the issuer has not been reached), and :class:`deskpool.errors.AuthNotConfigured` (503) while
  it lacks its settings (SPEC §5.1.4: for OIDC, the issuer or the audience).

The platform knows nothing of how a provider verifies: what it is configured with, what it
answers while unconfigured (:meth:`AuthProvider.not_configured_error`) and how a browser page
signs in through it (:meth:`AuthProvider.browser_sign_in`, used by ``/docs``) are the
provider's. Everything here is pure: no I/O, no globals. Providers live in plugins
(``deskpool_oidc``).
"""

from __future__ import annotations

import abc
import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from deskpool.errors import AuthNotConfigured, Unauthenticated

if TYPE_CHECKING:
    from deskpool.config import Config

__all__ = [
    "AuthProvider",
    "AuthProviderFactory",
    "AuthProviderState",
    "BrowserSignIn",
    "VerifiedToken",
    "bearer_token_from_header",
    "claim_at_path",
]

#: RFC 6750 ``b64token``: the characters a bearer token may contain.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class AuthProviderState(enum.Enum):
    """Where an auth provider is in its life.

    Only :attr:`READY` verifies tokens. :attr:`NOT_CONFIGURED` answers
    :class:`deskpool.errors.AuthNotConfigured`; the other states answer
    :class:`deskpool.errors.ServiceUnavailable`.
    """

    #: Created; :meth:`AuthProvider.start` has not been called.
    STOPPED = "stopped"
    #: The issuer or audience is not configured; protected routes answer 503.
    NOT_CONFIGURED = "not_configured"
    #: Started; the first contact with the issuer has not succeeded yet.
    STARTING = "starting"
    #: The issuer could not be reached; retrying with backoff.
    UNAVAILABLE = "unavailable"
    #: Verifying tokens.
    READY = "ready"
    #: Closed; it will not verify again.
    CLOSED = "closed"


@dataclass(frozen=True)
class VerifiedToken:
    """The identity an access token proves, after its signature and claims were checked.

    :param issuer: the ``iss`` claim (equal to the configured issuer).
    :param subject: the ``sub`` claim; with the issuer, it identifies the user.
    :param audience: the ``aud`` claim as a tuple (one of them is the configured audience).
    :param expires_at: the ``exp`` claim, seconds since the epoch.
    :param email: the ``email`` claim, if any.
    :param email_verified: whether the issuer says it verified the email.
    :param name: the ``name`` claim, if any.
    :param username: the ``preferred_username`` claim, if any.
    :param groups: values of the groups claim (``AUTH_OIDC_GROUPS_CLAIM``).
    :param roles: values of the roles claim (``AUTH_OIDC_ROLES_CLAIM``).
    :param token_id: the ``jti`` claim, if any.
    :param claims: every claim of the token, read-only.
    """

    issuer: str
    subject: str
    audience: tuple[str, ...]
    expires_at: float
    email: str | None = None
    email_verified: bool = False
    name: str | None = None
    username: str | None = None
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    token_id: str | None = None
    claims: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False, repr=False
    )

    @classmethod
    def from_claims(
        cls, claims: Mapping[str, Any], *, groups_claim: str = "groups", roles_claim: str = "roles"
    ) -> VerifiedToken:
        """Build the identity from claims that were already verified.

        The provider has checked ``iss``, ``sub``, ``aud`` and ``exp``; this only reads them.

        :param claims: the verified claims.
        :param groups_claim: dot-path of the group membership claim.
        :param roles_claim: dot-path of the role membership claim.
        """
        audience = claims.get("aud")
        return cls(
            issuer=str(claims["iss"]),
            subject=str(claims["sub"]),
            audience=(audience,) if isinstance(audience, str) else tuple(audience or ()),
            expires_at=float(claims["exp"]),
            email=_optional_str(claims.get("email")),
            email_verified=_claim_is_true(claims.get("email_verified")),
            name=_optional_str(claims.get("name")),
            username=_optional_str(claims.get("preferred_username")),
            groups=claim_at_path(claims, groups_claim),
            roles=claim_at_path(claims, roles_claim),
            token_id=_optional_str(claims.get("jti")),
            claims=MappingProxyType(dict(claims)),
        )


@dataclass(frozen=True)
class BrowserSignIn:
    """How a browser page of the API (``/docs``) signs a person in through the provider.

    The page runs the authorization code flow with PKCE as a public client.

    :param discovery_url: the OpenID Provider metadata the page reads.
    :param client_id: the client the page signs in as (the console's).
    :param scopes: the scopes it asks for, space-separated.
    :param origins: the origins the page talks to (its content security policy allows them).
    """

    discovery_url: str
    client_id: str
    scopes: str
    origins: tuple[str, ...] = ()


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _claim_is_true(value: object) -> bool:
    # Some issuers (Amazon Cognito among them) write booleans as the strings "true"/"false".
    return value is True or (isinstance(value, str) and value.lower() == "true")


def claim_at_path(claims: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """Read a membership claim (groups, roles) by name or dot-path, as a tuple of strings.

    ``claim_at_path(claims, "realm_access.roles")`` reads ``claims["realm_access"]["roles"]``.
    A key that itself contains dots (``https://example.com/groups``) is matched whole first, and
    at every level the longest matching key wins. The value may be a string (one member), a list
    (its string items; other items are ignored), or an object (its keys, as Zitadel writes
    roles). Blank strings are dropped and duplicates removed, order kept. A missing claim reads
    as no membership.
    """
    if not path:
        return ()
    found = _resolve(claims, path.split("."))
    if isinstance(found, str):
        values: list[Any] = [found]
    elif isinstance(found, list | tuple):
        values = list(found)
    elif isinstance(found, Mapping):
        values = list(found.keys())
    else:
        return ()
    return tuple(dict.fromkeys(v for v in values if isinstance(v, str) and v.strip()))


def _resolve(node: Any, parts: list[str]) -> Any:
    if not parts:
        return node
    if not isinstance(node, Mapping):
        return None
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in node:
            found = _resolve(node[key], parts[end:])
            if found is not None:
                return found
    return None


def bearer_token_from_header(authorization: str | None) -> str:
    """Return the token of an ``Authorization: Bearer <token>`` header value.

    :raises Unauthenticated: with no ``error`` code when the header is absent (RFC 6750 §3.1),
        and ``invalid_request`` when it is not a well-formed bearer credential.
    """
    if authorization is None or not authorization.strip():
        raise Unauthenticated("A bearer token is required.", error=None)
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("The Authorization header must use the Bearer scheme.", error=None)
    token = token.strip()
    if not token or not _B64TOKEN.fullmatch(token):
        raise Unauthenticated("The bearer token is malformed.", error="invalid_request")
    return token


class AuthProvider(abc.ABC):
    """The contract of an auth provider plugin.

    One instance serves one process. The API calls :meth:`start` when it starts (it must not
    raise when the issuer is unreachable: the provider keeps retrying and reports it through
    :attr:`state`), :meth:`verify` for every protected request, and :meth:`close` when it stops.
    :meth:`verify` is on the hot path of every request and must be cheap for a token it has
    already verified.
    """

    #: The entry-point name of the provider (``oidc``).
    name: str = "abstract"

    @property
    @abc.abstractmethod
    def state(self) -> AuthProviderState:
        """Where the provider is in its life."""

    @property
    def ready(self) -> bool:
        """Whether :meth:`verify` can verify tokens now."""
        return self.state is AuthProviderState.READY

    @property
    def configured(self) -> bool:
        """Whether the provider has the settings it needs (else protected routes answer 503)."""
        return self.state is not AuthProviderState.NOT_CONFIGURED

    def not_configured_error(self) -> AuthNotConfigured:
        """What protected routes answer while :attr:`configured` is false.

        Providers override it to name the settings an operator must give.
        """
        return AuthNotConfigured(
            f"Protected operations are unavailable until the {self.name} auth provider is "
            "configured."
        )

    def browser_sign_in(self) -> BrowserSignIn | None:
        """How ``/docs`` signs a person in, or ``None`` when the provider offers no browser flow.

        The default offers none; the page then documents the API without "Try it out" sign-in.
        """
        return None

    @abc.abstractmethod
    async def start(self) -> None:
        """Acquire connections and contact the issuer; never raises because it is unreachable."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what :meth:`start` acquired and stop background work."""

    @abc.abstractmethod
    async def verify(self, token: str) -> VerifiedToken:
        """Verify ``token`` and return the identity it proves.

        :param token: the bearer token, without the ``Bearer`` scheme.
        :raises deskpool.errors.Unauthenticated: the token is not acceptable.
        :raises deskpool.errors.ServiceUnavailable: the provider cannot verify tokens now
            (:class:`deskpool.errors.AuthNotConfigured` when it is not configured).
        """


#: What ``deskpool_register_auth_providers`` registers: builds the provider from the
#: configuration of the process.
AuthProviderFactory: TypeAlias = Callable[["Config"], AuthProvider]
