"""Telling a client's token (client credentials grant) from a person's, by its claims alone."""

from __future__ import annotations

from typing import Any

import pytest

from deskpool.identity.kinds import HUMAN, SERVICE, principal_kind


@pytest.mark.parametrize(
    ("subject", "claims"),
    [
        ("robot", {"client_id": "robot"}),  # RFC 9068 §2.2, the test issuer
        ("0oa1robot", {"cid": "0oa1robot", "scp": ["deskpool"]}),  # Okta
        ("robot", {"azp": "robot", "client_id": "deskpool-console"}),
        ("abc@clients", {"gty": "client-credentials", "azp": "abc"}),  # Auth0
        ("0f3c-oid", {"idtyp": "app", "azp": "9a1e-app"}),  # Microsoft Entra ID
    ],
)
def test_a_clients_token_is_a_service_principal(subject: str, claims: dict[str, Any]) -> None:
    assert principal_kind(subject, claims) == SERVICE


@pytest.mark.parametrize(
    ("subject", "claims"),
    [
        ("robot", {}),
        ("robot", {"client_id": "deskpool-console", "azp": "deskpool-console"}),
        ("alice@example.test", {"cid": "0oa1console", "uid": "00u1"}),  # Okta, a person
        ("robot", {"client_id": ["robot"]}),  # not a string: not the subject
        ("alice", {"gty": "password", "idtyp": "user"}),
        ("alice", {"email": "robot", "preferred_username": "robot", "name": "robot"}),
    ],
)
def test_every_other_token_is_a_persons(subject: str, claims: dict[str, Any]) -> None:
    assert principal_kind(subject, claims) == HUMAN
