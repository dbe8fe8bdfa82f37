"""The rules of access administration, as pure code: escalation and lock-out.

**Nobody hands out more than they hold** (the rule of Kubernetes RBAC). A change that confers
permissions on anyone (a grant, a role created or given more permissions, a group member
added, an OIDC claim bound to a group, a disabled user enabled again) is allowed only when the
caller already holds every permission it confers. ``platform:admin`` is held only by platform
admins, so only a platform admin can confer it, or anything that carries it. Refusals are 403
with the code ``escalation_denied`` and the missing permissions in ``missing_permissions``.

**Desktops are handed out by those who may manage pools.** A change that gives anyone access
to a pool's desktops (a member added to a group entitled to a pool, a claim bound to such a
group, a user entitled directly or through a group enabled again, an entitlement created, a
desktop of a persistent pool assigned to a user not entitled to it)
confers ``pools:manage`` on top of what it confers otherwise: a holder of ``groups:manage`` or
``roles:manage`` alone cannot give a desktop to anyone, themselves included. A role change
that gives pool access gives ``pools:manage`` itself, so it is covered by the rule above.

**Nobody disables or enables someone who holds more.** Disabling or enabling a user is
allowed only to a caller holding everything the user holds, by every route, as of the user's
last sign-in: direct grants, groups by membership or by a bound group claim, roles of the
roles claim, and ``pools:manage`` when the user is entitled to a pool by any of these. So a
holder of ``platform:admin`` by any route is disabled or enabled only by a platform admin.

**Only a platform admin takes from a platform admin.** Disabling a user who holds
``platform:admin`` (as above), removing them from a group, revoking any grant they
(or a group they are a member of) hold, deleting such a group, changing or deleting a role
they hold or that carries ``platform:admin``, or deleting a claim binding to a group that
carries it, requires ``platform:admin``: 403 ``escalation_denied`` naming it.

**The instance keeps a platform admin.** A change that would leave no enabled user holding
``platform:admin`` through the database (a grant to the user, or to a group the user is a
member of) is refused with 409 ``last_platform_admin``. Admins by an OIDC claim (a group
binding, a roles claim) are not counted: they exist only while the identity provider says so.
Nobody can disable their own account (409 ``cannot_disable_self``).

No I/O happens here; :mod:`deskpool.identity.service` and :mod:`deskpool.identity.user_state`
load what these functions decide on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from deskpool.errors import Conflict, Forbidden
from deskpool.permissions import (
    PLATFORM_ADMIN,
    EffectivePermissions,
    Grant,
    Role,
    has_permission,
    resolve_permissions,
)


class EscalationDenied(Forbidden):
    """The change would confer permissions the caller does not hold.

    :param missing: the permissions the caller lacks, sorted.
    :param what: what the change is, for the message (``grant this role``).
    :param resource_type: the resource changed (``roles``, ``groups``, ``users``).
    """

    code = "escalation_denied"
    title = "Permission escalation denied"

    def __init__(self, missing: Iterable[str], what: str, resource_type: str = "roles") -> None:
        self.missing = sorted(set(missing))
        self.resource_type = resource_type
        names = ", ".join(self.missing)
        super().__init__(
            f"You cannot {what}: it would confer {names}, which you do not hold. Only a holder "
            f"of every permission a change confers may make it.",
            extra={"missing_permissions": self.missing},
        )


class AdminProtected(EscalationDenied):
    """The change takes from a holder of ``platform:admin``, and the caller is not one."""

    def __init__(self, what: str, resource_type: str) -> None:
        Forbidden.__init__(
            self,
            f"You cannot {what}: it takes from a holder of {PLATFORM_ADMIN}, and only a holder "
            f"of {PLATFORM_ADMIN} may do that.",
            extra={"missing_permissions": [PLATFORM_ADMIN]},
        )
        self.missing = [PLATFORM_ADMIN]
        self.resource_type = resource_type


class OutranksActor(EscalationDenied):
    """The user to disable or enable holds what the caller does not."""

    def __init__(self, missing: Iterable[str], what: str, resource_type: str) -> None:
        self.missing = sorted(set(missing))
        self.resource_type = resource_type
        names = ", ".join(self.missing)
        Forbidden.__init__(
            self,
            f"You cannot {what}: the user holds {names} (by a grant, a group or a group claim "
            f"of their last sign-in), which you do not hold. Only a holder of everything a user "
            f"holds may disable or enable them.",
            extra={"missing_permissions": self.missing},
        )


class LastPlatformAdmin(Conflict):
    """The change would leave no enabled platform admin."""

    code = "last_platform_admin"
    title = "The last platform admin"

    def __init__(self, what: str) -> None:
        super().__init__(
            f"You cannot {what}: the instance would be left with no enabled platform admin. "
            "Give another user platform:admin first."
        )


class CannotDisableSelf(Conflict):
    """A user asked to disable their own account."""

    code = "cannot_disable_self"
    title = "Cannot disable yourself"

    def __init__(self) -> None:
        super().__init__("You cannot disable your own account; ask another administrator.")


def conferred_by_role(role: Role) -> frozenset[str]:
    """What granting ``role`` confers."""
    return role.permissions


def conferred_by_grant(
    role_key: str | None, permission: str | None, roles: Mapping[str, Role]
) -> frozenset[str]:
    """What a grant of the role ``role_key`` or of ``permission`` confers."""
    if permission is not None:
        return frozenset({permission})
    role = roles.get(role_key or "")
    return role.permissions if role is not None else frozenset()


def conferred_by_grants(grants: Iterable[Grant], roles: Mapping[str, Role]) -> frozenset[str]:
    """What holding every grant of ``grants`` confers (a group's grants, a user's)."""
    return resolve_permissions(grants, (), roles).permissions


#: What access to a pool's desktops confers: only who may manage pools hands it out.
POOL_ACCESS = "pools:manage"


def with_pool_access(conferred: frozenset[str], gives_pool_access: bool) -> frozenset[str]:
    """What a change confers when it also gives access to pools (``pools:manage`` added)."""
    return conferred | {POOL_ACCESS} if gives_pool_access else conferred


def missing_permissions(held: EffectivePermissions, conferred: Iterable[str]) -> list[str]:
    """The permissions of ``conferred`` that ``held`` lacks, sorted.

    ``platform:admin`` holds everything.
    """
    return sorted({name for name in conferred if not has_permission(held, name)})


def check_escalation(
    held: EffectivePermissions | None,
    conferred: Iterable[str],
    what: str,
    resource_type: str = "roles",
) -> None:
    """Refuse a change conferring permissions its caller does not hold.

    :param held: what the caller holds; ``None`` for the platform acting on the operator's own
        configuration or command line, which no permission limits.
    :param resource_type: the resource changed, for the audit trail.
    :raises EscalationDenied: naming what is missing.
    """
    if held is None:
        return
    missing = missing_permissions(held, conferred)
    if missing:
        raise EscalationDenied(missing, what, resource_type)


def check_holds_all(
    held: EffectivePermissions, holds: Iterable[str], what: str, resource_type: str
) -> None:
    """Refuse to disable or enable a user who holds what the caller does not.

    :param held: what the caller holds.
    :param holds: what the user holds by every route (``pools:manage`` for a pool entitlement).
    :raises OutranksActor: naming what the caller lacks (``platform:admin`` for a platform
        admin, since only it holds ``platform:admin``).
    """
    missing = missing_permissions(held, holds)
    if missing:
        raise OutranksActor(missing, what, resource_type)


def check_takes_from_admin(
    held: EffectivePermissions | None, takes_from_admin: bool, what: str, resource_type: str
) -> None:
    """Refuse a change that takes from a platform admin unless the caller is one.

    :param held: what the caller holds; ``None`` for the platform itself (not limited).
    :raises AdminProtected: naming ``platform:admin`` as missing.
    """
    if held is not None and takes_from_admin and not held.is_platform_admin:
        raise AdminProtected(what, resource_type)


def check_admins_remain(before: int, after: int, what: str) -> None:
    """Refuse a change that takes the instance from some enabled platform admins to none.

    :raises LastPlatformAdmin: ``before`` > 0 and ``after`` == 0.
    """
    if before > 0 and after == 0:
        raise LastPlatformAdmin(what)


def admin_role_keys(roles: Mapping[str, Role]) -> list[str]:
    """The keys of every role that carries ``platform:admin``."""
    return sorted(key for key, role in roles.items() if PLATFORM_ADMIN in role.permissions)
