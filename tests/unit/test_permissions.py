"""The permission model: catalog, built-in roles, resolution and checks (pure, no I/O)."""

from __future__ import annotations

import pytest

from deskpool.identity.rules import (
    EscalationDenied,
    OutranksActor,
    check_escalation,
    check_holds_all,
    conferred_by_grants,
)
from deskpool.permissions import (
    NO_PERMISSIONS,
    PLATFORM_ADMIN,
    EffectivePermissions,
    Grant,
    PermissionCatalog,
    Role,
    builtin_roles,
    has_permission,
    resolve_permissions,
)

RESOURCES = (
    "clusters",
    "pools",
    "desktops",
    "sessions",
    "users",
    "groups",
    "roles",
    "audit",
    "jobs",
    "license",
    "recordings",
    "reports",
    "schedules",
    "webhooks",
)
#: The resources that have no ``:manage`` permission (nothing to change through them).
READ_ONLY = {"audit", "recordings", "reports"}


def effective(*names: str) -> EffectivePermissions:
    return EffectivePermissions(frozenset(names))


# --------------------------------------------------------------------------- catalog


def test_catalog_names_every_resource_read_and_manage_except_the_read_only() -> None:
    catalog = PermissionCatalog.builtin()
    names = set(catalog.names())
    assert PLATFORM_ADMIN in names
    for resource in RESOURCES:
        assert f"{resource}:read" in names
    for resource in set(RESOURCES) - READ_ONLY:
        assert f"{resource}:manage" in names
    assert not {f"{resource}:manage" for resource in READ_ONLY} & names
    assert len(names) == 1 + len(RESOURCES) + len(RESOURCES) - len(READ_ONLY)
    assert catalog.names()[0] == PLATFORM_ADMIN


@pytest.mark.parametrize(
    ("name", "known"),
    [
        ("pools:read", True),
        ("pools:manage", True),
        ("audit:read", True),
        ("audit:manage", False),
        ("platform:admin", True),
        ("platform:read", False),
        ("pools:delete", False),
        ("widgets:read", False),
        ("pools", False),
        ("", False),
    ],
)
def test_catalog_membership(name: str, known: bool) -> None:
    assert (name in PermissionCatalog.builtin()) is known


def test_catalog_validate_rejects_a_typo_by_name() -> None:
    catalog = PermissionCatalog.builtin()
    assert catalog.validate("pools:read") == "pools:read"
    with pytest.raises(ValueError, match="pool:read"):
        catalog.validate("pool:read")


def test_a_plugin_resource_extends_a_copy_of_the_catalog() -> None:
    builtin = PermissionCatalog.builtin()
    extended = builtin.with_resource("widgets", manageable=False)
    assert "widgets:read" in extended
    assert "widgets:manage" not in extended
    assert "widgets:read" not in builtin
    with pytest.raises(ValueError, match="already exists"):
        extended.with_resource("pools")
    with pytest.raises(ValueError, match="invalid"):
        builtin.with_resource("Bad:Name")


# --------------------------------------------------------------------------- built-in roles


def test_builtin_roles_are_exactly_the_four() -> None:
    roles = builtin_roles()
    assert set(roles) == {"platform_admin", "operator", "auditor", "desktop_user"}
    assert all(role.builtin for role in roles.values())
    catalog = PermissionCatalog.builtin()
    for role in roles.values():
        assert role.check(catalog) is role


def test_platform_admin_role_holds_platform_admin_only() -> None:
    assert builtin_roles()["platform_admin"].permissions == {PLATFORM_ADMIN}


def test_operator_manages_the_estate_and_reads_the_rest() -> None:
    operator = builtin_roles()["operator"].permissions
    for resource in ("clusters", "pools", "desktops", "sessions", "jobs", "schedules"):
        assert f"{resource}:read" in operator
        assert f"{resource}:manage" in operator
    for resource in ("audit", "users", "groups", "roles", "license", "reports"):
        assert f"{resource}:read" in operator
        assert f"{resource}:manage" not in operator
    assert PLATFORM_ADMIN not in operator


def test_auditor_reads_everything_but_recordings_and_manages_nothing() -> None:
    auditor = builtin_roles()["auditor"].permissions
    assert auditor == {f"{resource}:read" for resource in RESOURCES} - {"recordings:read"}


def test_only_platform_admin_reads_recordings_by_default() -> None:
    roles = builtin_roles()
    holders = {
        key
        for key, role in roles.items()
        if has_permission(resolve_permissions([Grant.of_role(key)], [], roles), "recordings:read")
    }
    assert holders == {"platform_admin"}


def test_auditor_also_reads_a_plugin_resource() -> None:
    catalog = PermissionCatalog.builtin().with_resource("widgets")
    assert "widgets:read" in builtin_roles(catalog)["auditor"].permissions


def test_desktop_user_holds_no_administrative_permission() -> None:
    roles = builtin_roles()
    assert roles["desktop_user"].permissions == frozenset()
    resolved = resolve_permissions([Grant.of_role("desktop_user")], [], roles)
    for name in PermissionCatalog.builtin():
        assert not has_permission(resolved, name)


def test_role_check_names_unknown_permissions() -> None:
    role = Role("broken", frozenset({"pools:read", "pools:destroy", "audit:manage"}))
    with pytest.raises(ValueError, match=r"audit:manage, pools:destroy"):
        role.check(PermissionCatalog.builtin())


# --------------------------------------------------------------------------- grants


def test_a_grant_names_exactly_one_of_role_or_permission() -> None:
    assert Grant.of_role("operator").role == "operator"
    assert Grant.of_permission("pools:read").permission == "pools:read"
    with pytest.raises(ValueError):
        Grant()
    with pytest.raises(ValueError):
        Grant(role="operator", permission="pools:read")


# --------------------------------------------------------------------------- resolution


def test_nothing_granted_resolves_to_nothing() -> None:
    assert resolve_permissions([], [], builtin_roles()) == NO_PERMISSIONS
    assert not has_permission(NO_PERMISSIONS, "pools:read")


def test_user_and_group_grants_are_united() -> None:
    resolved = resolve_permissions(
        [Grant.of_permission("pools:read")],
        [Grant.of_role("auditor"), Grant.of_permission("jobs:manage")],
        builtin_roles(),
    )
    assert has_permission(resolved, "pools:read")
    assert has_permission(resolved, "audit:read")
    assert has_permission(resolved, "jobs:manage")
    assert not has_permission(resolved, "pools:manage")
    assert resolved.roles == {"auditor"}


def test_manage_implies_read_of_the_same_resource_only() -> None:
    resolved = resolve_permissions([Grant.of_permission("pools:manage")], [], builtin_roles())
    assert has_permission(resolved, "pools:read")
    assert has_permission(resolved, "pools:manage")
    assert not has_permission(resolved, "desktops:read")


def test_custom_roles_are_resolved_like_builtin_ones() -> None:
    roles = {
        **builtin_roles(),
        "helpdesk": Role("helpdesk", frozenset({"sessions:manage", "desktops:read"})),
    }
    resolved = resolve_permissions([], [Grant.of_role("helpdesk")], roles)
    assert resolved.permissions == {"sessions:manage", "sessions:read", "desktops:read"}


def test_claimed_roles_grant_defined_roles_and_unknown_ones_are_reported() -> None:
    resolved = resolve_permissions(
        [], [], builtin_roles(), claimed_roles=["operator", "kubernetes-admin"]
    )
    assert has_permission(resolved, "clusters:manage")
    assert resolved.roles == {"operator"}
    assert resolved.unknown_roles == {"kubernetes-admin"}


def test_unknown_granted_role_grants_nothing() -> None:
    resolved = resolve_permissions([Grant.of_role("ghost")], [], builtin_roles())
    assert resolved.permissions == frozenset()
    assert resolved.unknown_roles == {"ghost"}


def test_grants_may_be_one_shot_iterators() -> None:
    resolved = resolve_permissions(
        iter([Grant.of_role("operator"), Grant.of_permission("users:manage")]),
        iter([Grant.of_permission("license:manage")]),
        builtin_roles(),
    )
    assert has_permission(resolved, "pools:manage")
    assert has_permission(resolved, "users:manage")
    assert has_permission(resolved, "license:manage")


# --------------------------------------------------------------------------- checks


@pytest.mark.parametrize("required", ["pools:read", "pools:manage", "audit:read", "anything:else"])
def test_platform_admin_overrides_every_check(required: str) -> None:
    admin = resolve_permissions([Grant.of_role("platform_admin")], [], builtin_roles())
    assert admin.is_platform_admin
    assert has_permission(admin, required)


def test_read_does_not_imply_manage() -> None:
    assert has_permission(effective("pools:read"), "pools:read")
    assert not has_permission(effective("pools:read"), "pools:manage")


def test_operator_cannot_manage_users_or_roles() -> None:
    operator = resolve_permissions([Grant.of_role("operator")], [], builtin_roles())
    assert not operator.is_platform_admin
    assert not has_permission(operator, "users:manage")
    assert not has_permission(operator, "roles:manage")
    assert not has_permission(operator, "license:manage")
    assert has_permission(operator, "pools:manage")
    assert "pools:manage" in operator


def test_schedules_permissions_are_escalation_checked_like_any_other() -> None:
    roles = builtin_roles()
    conferred = conferred_by_grants([Grant.of_role("operator")], roles)
    assert {"schedules:read", "schedules:manage"} <= conferred
    roles_only = resolve_permissions([Grant.of_permission("roles:manage")], [], roles)
    with pytest.raises(EscalationDenied) as denied:
        check_escalation(roles_only, conferred, "grant the operator role")
    assert {"schedules:read", "schedules:manage"} <= set(denied.value.missing)
    holder = resolve_permissions([Grant.of_permission("schedules:manage")], [], roles)
    check_escalation(holder, {"schedules:read", "schedules:manage"}, "grant schedules")


def test_disabling_or_enabling_needs_everything_the_user_holds() -> None:
    users_manager = resolve_permissions([Grant.of_permission("users:manage")], (), builtin_roles())
    admin = resolve_permissions([Grant.of_role("platform_admin")], (), builtin_roles())
    with pytest.raises(OutranksActor) as refused:
        check_holds_all(users_manager, {"platform:admin"}, "enable this user", "users")
    assert refused.value.missing == ["platform:admin"]
    assert refused.value.code == "escalation_denied"
    assert "platform:admin" in refused.value.detail
    with pytest.raises(OutranksActor) as refused:
        check_holds_all(users_manager, {"pools:manage", "users:read"}, "disable it", "users")
    assert refused.value.missing == ["pools:manage"]  # users:read is implied by users:manage
    check_holds_all(users_manager, {"users:read"}, "disable it", "users")
    check_holds_all(users_manager, set(), "disable it", "users")
    check_holds_all(admin, {"platform:admin", "pools:manage"}, "enable this user", "users")


def test_the_built_in_roles_are_built_once_and_handed_out_as_copies() -> None:
    first = builtin_roles()
    first["custom"] = Role("custom", frozenset({"pools:read"}))
    del first["operator"]
    again = builtin_roles()
    assert "custom" not in again
    assert again == builtin_roles(PermissionCatalog.builtin())
    assert again["operator"] is builtin_roles()["operator"]
