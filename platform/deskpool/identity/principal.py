"""The authenticated caller of one request."""

from __future__ import annotations

from dataclasses import dataclass

from deskpool.identity.kinds import HUMAN
from deskpool.permissions import EffectivePermissions, has_permission


@dataclass(frozen=True)
class GroupRef:
    """A local group the principal belongs to, and why (``member`` or ``claim``)."""

    id: str
    key: str
    via: str


@dataclass(frozen=True)
class Principal:
    """A signed-in user with its resolved permissions.

    :param id: the local user id (a UUID string).
    :param issuer: the token's issuer.
    :param subject: the token's subject.
    :param groups: local groups, by membership or by an OIDC group claim binding.
    :param claimed_groups: the raw group claim values of the token.
    :param effective: the resolved permissions.
    :param kind: ``human`` (a person) or ``service`` (a client of the client credentials grant,
        :mod:`deskpool.identity.kinds`).
    """

    id: str
    issuer: str
    subject: str
    email: str | None
    display_name: str | None
    disabled: bool
    groups: tuple[GroupRef, ...]
    claimed_groups: tuple[str, ...]
    claimed_roles: tuple[str, ...]
    effective: EffectivePermissions
    kind: str = HUMAN

    def may(self, permission: str) -> bool:
        """Whether the principal holds ``permission`` (``platform:admin`` overrides)."""
        return has_permission(self.effective, permission)

    @property
    def group_ids(self) -> tuple[str, ...]:
        """Ids of every group the principal belongs to."""
        return tuple(group.id for group in self.groups)
