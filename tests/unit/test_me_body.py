"""``GET /api/v1/me``'s body, rendered in two halves, is the schema's rendering byte for byte."""

from __future__ import annotations

import json
from unittest import mock

from marshmallow import fields

from deskpool.api.resources.identity_schemas import MeSchema
from deskpool.api.resources.me import ACCESS_FIELDS, PERSON_FIELDS, MeRenderer, _me
from deskpool.identity.principal import GroupRef, Principal
from deskpool.permissions import EffectivePermissions


def _principal(
    n: int, *, groups: int = 2, admin: bool = False, email: str | None = None
) -> Principal:
    permissions = frozenset({"pools:read", "desktops:read", "sessions:manage"})
    if admin:
        permissions |= {"platform:admin"}
    return Principal(
        id=f"00000000-0000-4000-8000-{n:012d}",
        issuer="https://issuer.example/realms/été",
        subject=f"user-{n}",
        email=email,
        display_name=None if n % 2 else f'Zoë "{n}" O\'Brien',
        disabled=False,
        groups=tuple(GroupRef(f"g-{g}", f"group-{g}", "claim") for g in range(groups)),
        claimed_groups=("staff",),
        claimed_roles=(),
        effective=EffectivePermissions(permissions, frozenset({"viewer", "helpdesk"})),
    )


def test_the_fields_split_are_the_schemas_fields_in_its_order() -> None:
    schema = MeSchema()
    assert tuple(schema.fields) == PERSON_FIELDS + ACCESS_FIELDS
    # Who the caller is is rendered without the schema: it must stay text.
    assert {type(schema.fields[name]) for name in PERSON_FIELDS} == {fields.String}


def test_a_body_is_the_schemas_rendering_of_the_caller() -> None:
    renderer = MeRenderer()
    principals = [
        _principal(1),
        _principal(2, email="b@example.com"),
        _principal(3, groups=0),
        _principal(4, admin=True, email="ünï@example.com"),
        _principal(5, groups=5),
    ]
    for principal in principals:
        body = renderer.body(principal)
        assert body == json.dumps(MeSchema().dump(_me(principal))).encode(), principal
        assert json.loads(body)["subject"] == principal.subject


def test_members_of_one_team_share_the_rendering_of_what_they_may_do() -> None:
    renderer = MeRenderer()
    with mock.patch.object(renderer._access, "dump", wraps=renderer._access.dump) as dump:
        for n in range(1, 21):
            renderer.body(_principal(n))
        renderer.body(_principal(21, admin=True))

    # Twenty colleagues with the same groups and roles, and one administrator.
    assert dump.call_count == 2
