"""What a user keeps after a change of access: plain data and rules, no I/O.

A user keeps a desktop (its open tunnels, its unredeemed tokens, the desktop they are logged on
to) while they are enabled and may open desktops of its pool: entitled to it (directly, through
a group they are a member of, or through a group bound to one of their token's group claims), or
holding ``pools:manage``, as :func:`deskpool.sessions.service.may_open` decides when a desktop is
opened. A user keeps watching a session (shadowing) while they are enabled and hold
``sessions:manage``, the permission the shadow was issued under.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from deskpool.permissions import EffectivePermissions, has_permission

#: The permission that opens a desktop of any pool without an entitlement.
OPEN_ANY_POOL = "pools:manage"
#: The permission that lets an administrator watch a session read-only.
SHADOW = "sessions:manage"


@dataclass(frozen=True)
class Holding:
    """What one user holds now.

    :param user_id: the user.
    :param disabled: the user is disabled (or gone): they keep nothing.
    :param effective: the permissions their grants, groups and last claims resolve to.
    :param entitled_pools: the pools they are entitled to, directly or through a group.
    """

    user_id: uuid.UUID
    disabled: bool
    effective: EffectivePermissions
    entitled_pools: frozenset[uuid.UUID]

    def keeps_desktop(self, pool_id: uuid.UUID) -> bool:
        """Whether the user may still use a desktop of ``pool_id``."""
        if self.disabled:
            return False
        return pool_id in self.entitled_pools or has_permission(self.effective, OPEN_ANY_POOL)

    def keeps_watching(self) -> bool:
        """Whether the user may still watch a session read-only."""
        return not self.disabled and has_permission(self.effective, SHADOW)

    def keeps_permission(self, permission: str) -> bool:
        """Whether the user is enabled and still holds ``permission`` (a download's, say)."""
        return not self.disabled and has_permission(self.effective, permission)

    def keeps_session(self, pool_id: uuid.UUID, *, read_only: bool) -> bool:
        """Whether a session (a user's tunnel, or a read-only view) of ``pool_id`` may go on."""
        return self.keeps_watching() if read_only else self.keeps_desktop(pool_id)


def nobody(user_id: uuid.UUID) -> Holding:
    """The holding of a user that no longer exists: nothing."""
    return Holding(user_id, True, EffectivePermissions(), frozenset())
