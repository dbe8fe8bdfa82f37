"""The permission model, as pure code: the catalog, the built-in roles and their resolution.

Permissions are named ``<resource>:read`` and ``<resource>:manage`` (SPEC §5.2); reads need the
first, operations that create, change or delete need the second, and ``platform:admin``
overrides every check. Permissions are granted to a user or to a group, either one by one or
through a role (a named set of permissions); a user also holds the roles its access token
claims (``AUTH_OIDC_ROLES_CLAIM``) when a role of that key is defined.

``<resource>:manage`` implies ``<resource>:read`` of the same resource: an administrator who may
change pools may also list them. A desktop user needs none of these: opening a desktop of a pool
the user is entitled to is decided by the entitlement, not by a permission.

No I/O happens here: the database layer loads grants and role definitions, and
:func:`resolve_permissions` turns them into :class:`EffectivePermissions`, which
:func:`has_permission` checks on every request.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "BUILTIN_RESOURCES",
    "NO_PERMISSIONS",
    "PLATFORM_ADMIN",
    "PRIVATE_READS",
    "EffectivePermissions",
    "Grant",
    "PermissionCatalog",
    "Role",
    "builtin_roles",
    "has_permission",
    "permission_name",
    "resolve_permissions",
]

#: The permission that overrides every check.
PLATFORM_ADMIN = "platform:admin"

READ = "read"
MANAGE = "manage"

#: The resources of the REST API and whether each has a ``:manage`` permission (DESIGN §6).
BUILTIN_RESOURCES: Mapping[str, bool] = MappingProxyType(
    {
        "clusters": True,
        "pools": True,
        "desktops": True,
        "sessions": True,
        "users": True,
        "groups": True,
        "roles": True,
        "audit": False,
        "jobs": True,
        "license": True,
        "recordings": False,
        "reports": False,
        "schedules": True,
        "webhooks": True,
    }
)

#: Read permissions no built-in role but ``platform_admin`` holds: what users' sessions showed
#: (``recordings:read``) is given to someone only on purpose, by a grant or a custom role.
PRIVATE_READS = frozenset({"recordings:read"})


def permission_name(resource: str, action: str) -> str:
    """Return ``<resource>:<action>`` (``permission_name("pools", "read") == "pools:read"``)."""
    return f"{resource}:{action}"


@dataclass(frozen=True)
class PermissionCatalog:
    """Every permission that exists: the built-in resources plus any a plugin adds.

    :param resources: resource name -> whether it has a ``:manage`` permission.
    """

    resources: Mapping[str, bool] = field(default_factory=lambda: BUILTIN_RESOURCES)

    @classmethod
    def builtin(cls) -> PermissionCatalog:
        """The catalog of the platform's own resources."""
        return cls(BUILTIN_RESOURCES)

    def with_resource(self, resource: str, *, manageable: bool = True) -> PermissionCatalog:
        """Return a catalog that also has ``resource`` (for a plugin's own routes).

        :raises ValueError: when the name is not a lowercase identifier or already exists.
        """
        if not resource.replace("_", "").isalnum() or resource != resource.lower():
            raise ValueError(f"invalid resource name {resource!r}")
        if resource in self.resources or resource == "platform":
            raise ValueError(f"resource {resource!r} already exists")
        return PermissionCatalog(MappingProxyType({**self.resources, resource: manageable}))

    def names(self) -> tuple[str, ...]:
        """Every permission name, ``platform:admin`` first, then by resource."""
        out = [PLATFORM_ADMIN]
        for resource, manageable in self.resources.items():
            out.append(permission_name(resource, READ))
            if manageable:
                out.append(permission_name(resource, MANAGE))
        return tuple(out)

    def read_permissions(self) -> frozenset[str]:
        """Every ``:read`` permission."""
        return frozenset(permission_name(resource, READ) for resource in self.resources)

    def __contains__(self, name: object) -> bool:
        if name == PLATFORM_ADMIN:
            return True
        if not isinstance(name, str):
            return False
        resource, _, action = name.partition(":")
        if resource not in self.resources:
            return False
        return action == READ or (action == MANAGE and self.resources[resource])

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def validate(self, name: str) -> str:
        """Return ``name`` if it is in the catalog.

        :raises ValueError: naming the unknown permission (a route table declaring a typo).
        """
        if name not in self:
            raise ValueError(f"unknown permission {name!r}")
        return name


@dataclass(frozen=True)
class Role:
    """A named set of permissions.

    :param key: the stable key (``operator``); token role claims name roles by it.
    :param permissions: the permissions the role grants.
    :param description: one sentence for the console.
    :param builtin: whether the platform defines it (built-in roles cannot be changed).
    """

    key: str
    permissions: frozenset[str]
    description: str = ""
    builtin: bool = False

    def check(self, catalog: PermissionCatalog) -> Role:
        """Return the role if all its permissions exist in ``catalog``.

        :raises ValueError: naming the unknown permissions.
        """
        unknown = sorted(p for p in self.permissions if p not in catalog)
        if unknown:
            raise ValueError(f"role {self.key!r} names unknown permissions: {', '.join(unknown)}")
        return self


def builtin_roles(catalog: PermissionCatalog | None = None) -> dict[str, Role]:
    """The built-in roles, by key.

    - ``platform_admin``: ``platform:admin``, which overrides every check;
    - ``operator``: reads and manages clusters, pools, desktops, sessions, jobs and
      schedules; reads audit, users, groups, roles, license and usage reports;
    - ``auditor``: every ``:read`` permission except session recordings (:data:`PRIVATE_READS`);
    - ``desktop_user``: no administrative permission; entitlements decide which desktops the
      user opens.

    :param catalog: the catalog whose ``:read`` permissions the auditor holds (plugins'
        resources included); the built-in catalog when omitted.
    """
    if catalog is None:
        # Every sign-in reads them (the custom roles are added to a copy): built once.
        return dict(_builtin_catalog_roles())
    return _roles_of(catalog)


@functools.cache
def _builtin_catalog_roles() -> Mapping[str, Role]:
    return MappingProxyType(_roles_of(PermissionCatalog.builtin()))


def _roles_of(catalog: PermissionCatalog) -> dict[str, Role]:
    """The built-in roles for ``catalog`` (see :func:`builtin_roles`)."""
    managed = ("clusters", "pools", "desktops", "sessions", "jobs", "schedules")
    read_only = ("audit", "users", "groups", "roles", "license", "reports")
    operator = frozenset(
        [permission_name(r, READ) for r in (*managed, *read_only)]
        + [permission_name(r, MANAGE) for r in managed]
    )
    roles = [
        Role(
            "platform_admin",
            frozenset({PLATFORM_ADMIN}),
            "Full control of the platform; overrides every permission check.",
            builtin=True,
        ),
        Role(
            "operator",
            operator,
            "Runs the desktop estate: clusters, pools, desktops, sessions, jobs and schedules.",
            builtin=True,
        ),
        Role(
            "auditor",
            catalog.read_permissions() - PRIVATE_READS,
            "Reads everything but session recordings, changes nothing.",
            True,
        ),
        Role(
            "desktop_user",
            frozenset(),
            "Opens the desktops of the pools the user is entitled to; no administration.",
            builtin=True,
        ),
    ]
    return {role.key: role for role in roles}


@dataclass(frozen=True)
class Grant:
    """One grant held by a user or a group: a role, or a single permission.

    Build it with :meth:`of_role` or :meth:`of_permission`.
    """

    role: str | None = None
    permission: str | None = None

    def __post_init__(self) -> None:
        if (self.role is None) == (self.permission is None):
            raise ValueError("a grant names exactly one of a role or a permission")

    @classmethod
    def of_role(cls, key: str) -> Grant:
        """A grant of the role ``key``."""
        return cls(role=key)

    @classmethod
    def of_permission(cls, name: str) -> Grant:
        """A grant of the single permission ``name``."""
        return cls(permission=name)


@dataclass(frozen=True)
class EffectivePermissions:
    """What one principal may do, resolved from its grants.

    :param permissions: every permission held, ``:manage`` already widened to ``:read``.
    :param roles: the keys of the roles that contributed.
    :param unknown_roles: role keys that were granted or claimed but are not defined (they
        grant nothing; the console can show them to an administrator).
    """

    permissions: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    unknown_roles: frozenset[str] = frozenset()

    @property
    def is_platform_admin(self) -> bool:
        """Whether ``platform:admin`` is held (every check passes)."""
        return PLATFORM_ADMIN in self.permissions

    def __contains__(self, name: object) -> bool:
        return name in self.permissions


#: Nobody: what an unknown or disabled principal holds.
NO_PERMISSIONS = EffectivePermissions()


def resolve_permissions(
    user_grants: Iterable[Grant],
    group_grants: Iterable[Grant],
    role_definitions: Mapping[str, Role],
    *,
    claimed_roles: Iterable[str] = (),
) -> EffectivePermissions:
    """Resolve what a user may do.

    :param user_grants: grants held by the user directly.
    :param group_grants: grants held by every group the user belongs to, together.
    :param role_definitions: every defined role by key (built-in and custom).
    :param claimed_roles: role keys from the access token's roles claim; each grants the
        defined role of that key, like a direct grant.
    :returns: the union of everything granted, with each ``<resource>:manage`` also granting
        ``<resource>:read``.
    """
    grants = (*user_grants, *group_grants)
    permissions = {g.permission for g in grants if g.permission is not None}
    role_keys = [*(g.role for g in grants if g.role is not None), *claimed_roles]
    roles: set[str] = set()
    unknown: set[str] = set()
    for key in role_keys:
        role = role_definitions.get(key)
        if role is None:
            unknown.add(key)
            continue
        roles.add(key)
        permissions.update(role.permissions)
    implied = {
        permission_name(name[: -len(MANAGE) - 1], READ)
        for name in permissions
        if name.endswith(":" + MANAGE)
    }
    return EffectivePermissions(
        frozenset(permissions | implied), frozenset(roles), frozenset(unknown)
    )


def has_permission(effective: EffectivePermissions, required: str) -> bool:
    """Whether ``effective`` allows an operation that declares ``required``.

    ``platform:admin`` overrides every check.
    """
    held = effective.permissions
    return required in held or PLATFORM_ADMIN in held
