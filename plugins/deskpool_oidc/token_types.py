"""What kind of JWT a bearer token is: an access token, or an ID token (or another) in disguise.

An ID token is issued *to a client* as proof of a sign-in (OpenID Connect Core §2); its
audience is that client. An API that accepts it as an access token lets anything that ever held
a console's ID token (a log line, a browser extension, a relying party it was shown to) call the
API. RFC 9068 gives access tokens a type of their own (``typ: at+jwt``); issuers that do not use
it still mark their ID tokens with claims no access token carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ACCESS_TOKEN_MEDIA_TYPE",
    "ID_TOKEN_CLAIMS",
    "ID_TOKEN_TYPE_CLAIMS",
    "not_an_access_token",
]

#: Claims that only an ID token carries (OpenID Connect Core §2, §3.1.3.6, §3.3.2.11; FAPI's
#: ``s_hash``): a bearer token with any of them is an ID token, unless typed ``at+jwt``.
ID_TOKEN_CLAIMS: tuple[str, ...] = ("nonce", "at_hash", "c_hash", "s_hash")

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
    return None
