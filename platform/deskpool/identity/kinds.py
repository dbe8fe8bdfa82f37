"""People and service principals: which one an access token is, told from its claims alone.

deskpool keys a user by its issuer, its subject and its **kind**: ``human`` (a person who signed
in) or ``service`` (a client that obtained its own token with the OAuth 2.0 client credentials
grant). A client and a person with the same ``sub`` are two users: a person never holds what a
client was granted, nor a client what a person was.

A token is a service principal's when its issuer says so in one of the ways issuers do:

- its ``client_id`` claim equals its ``sub`` (RFC 9068 §2.2: a token obtained with no resource
  owner names the client as its subject; the test identity provider does this), or its ``cid``
  claim does (Okta's name for the client id);
- its ``azp`` claim (the authorized party, the client) equals its ``sub``;
- its ``gty`` claim is ``client-credentials`` (Auth0);
- its ``idtyp`` claim is ``app`` (Microsoft Entra ID, with the optional claim ``idtyp``).

Every other token is a person's. A person's token names the client they signed in through
(``client_id`` or ``azp``: the console's), never themselves. The rule needs no setting and does
not trust anything a person can choose at their identity provider: which client a token was
issued to, and by which grant, is written by the issuer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

#: The kind of a person's user.
HUMAN: Final = "human"
#: The kind of a client's user (client credentials grant).
SERVICE: Final = "service"
#: The kind of a user stored before users had kinds, until its next sign-in settles it
#: (migration 0026): it shows no sign of a person (no email, no name).
UNSETTLED: Final = "unsettled"

Kind = Literal["human", "service"]


def principal_kind(subject: str, claims: Mapping[str, Any]) -> Kind:
    """Whether the verified token of ``subject`` with ``claims`` is a person's or a client's."""
    for client_claim in ("client_id", "cid", "azp"):
        client = claims.get(client_claim)
        if isinstance(client, str) and client == subject:
            return SERVICE
    if claims.get("gty") == "client-credentials" or claims.get("idtyp") == "app":
        return SERVICE
    return HUMAN
