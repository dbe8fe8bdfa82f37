"""What kind of JWT a bearer token is: an access token, or an ID token (or another) in disguise.

An ID token is issued *to a client* as proof of a sign-in (OpenID Connect Core §2); its
audience is that client. An API that accepts it as an access token lets anything that ever held
a console's ID token (a log line, a browser extension, a relying party it was shown to) call the
API. RFC 9068 gives access tokens a type of their own (``typ: at+jwt``); issuers that do not use
it put into their access tokens what an access token is for: the scope granted and the client
it was granted to, or the roles of an application. So a bearer token counts as an access token
only when it is typed ``at+jwt`` or carries one of :data:`ACCESS_TOKEN_CLAIMS`; one that also
carries what only ID tokens carry (:data:`ID_TOKEN_CLAIMS`, Keycloak's ``typ: ID``) is an ID
token all the same, unless typed ``at+jwt``.

What the issuers send (their documentation, and tokens they issued):

- Keycloak: both typed ``JWT``; access tokens carry ``scope``, ``azp``, ``typ: Bearer``; ID
  tokens ``typ: ID``, ``azp``, ``at_hash`` and ``nonce`` when one was sent.
- Entra ID: both typed ``JWT``; access tokens carry ``scp`` (delegated) or ``roles``
  (application), ``azp``, ``ver``; ID tokens ``aud`` = the client, ``nonce`` when sent.
- Okta: no ``typ``; access tokens carry ``scp``, ``cid``, ``uid``; ID tokens ``amr``, ``idp``,
  ``at_hash``.
- Auth0: ``typ: JWT`` (its RFC 9068 profile: ``at+jwt`` and ``client_id``); access tokens carry
  ``scope``, ``azp``; ID tokens the profile claims and ``sid``.
- oidc-provider (node): JWT access tokens typed ``at+jwt`` with ``client_id`` and ``scope``;
  ID tokens untyped, ``at_hash`` and ``nonce`` when they apply.

An ID token of a code flow without ``nonce`` and ``at_hash`` carries none of the ID-token
markers, but none of the access-token claims either: it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ACCESS_TOKEN_CLAIMS",
    "ACCESS_TOKEN_MEDIA_TYPE",
    "ID_TOKEN_CLAIMS",
    "ID_TOKEN_TYPE_CLAIMS",
    "not_an_access_token",
]

#: Claims that only an ID token carries (OpenID Connect Core §2, §3.1.3.6, §3.3.2.11; FAPI's
#: ``s_hash``): a bearer token with any of them is an ID token, unless typed ``at+jwt``.
ID_TOKEN_CLAIMS: tuple[str, ...] = ("nonce", "at_hash", "c_hash", "s_hash")

#: Claims that make a token not typed ``at+jwt`` an access token: the scope granted (``scope``,
#: RFC 9068 and Keycloak, Auth0; ``scp``, Entra ID and Okta), the client it was granted to
#: (``client_id``, RFC 9068) or an application's roles (``roles``, Entra ID).
ACCESS_TOKEN_CLAIMS: tuple[str, ...] = ("scope", "scp", "client_id", "roles")

#: Values of the ``typ`` claim with which an issuer marks a token that is not an access token
#: (Keycloak writes ``ID`` into its ID tokens and ``Bearer`` into its access tokens).
ID_TOKEN_TYPE_CLAIMS: frozenset[str] = frozenset({"ID"})

#: The ``typ`` header of an RFC 9068 access token (compared without case, with or without the
#: ``application/`` prefix, RFC 7515 §4.1.9).
ACCESS_TOKEN_MEDIA_TYPE = "at+jwt"


def not_an_access_token(header: Mapping[str, Any], claims: Mapping[str, Any]) -> str | None:
    """Why a verified token is not an access token (an ID token, say), or ``None`` if it is one.

    :param header: the token's JOSE header.
    :param claims: its verified claims.
    """
    typ = header.get("typ")
    if isinstance(typ, str):
        media_type = typ.strip().lower().removeprefix("application/")
        if media_type == ACCESS_TOKEN_MEDIA_TYPE:
            return None  # RFC 9068: typed as an access token
        if media_type.endswith("+jwt"):
            return "The token is typed as another kind of JWT, not as an access token."
    for claim in ID_TOKEN_CLAIMS:
        if claim in claims:
            return f"The token is an ID token (it carries {claim}); send an access token."
    marker = claims.get("typ")
    if isinstance(marker, str) and marker in ID_TOKEN_TYPE_CLAIMS:
        return "The token is an ID token (its typ claim says so); send an access token."
    if not any(claim in claims for claim in ACCESS_TOKEN_CLAIMS):
        return (
            "The token is not an access token: it is not typed at+jwt and carries none of "
            f"{', '.join(ACCESS_TOKEN_CLAIMS)} (an ID token, say); send an access token."
        )
    return None
