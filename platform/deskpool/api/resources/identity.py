"""Identity and access over REST: the caller, users, groups, roles, grants, bindings.

Every change is recorded in the audit trail in the same transaction, and announced so that
every process drops the effective permissions it cached.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.errors import BadRequest, Conflict, FieldError, NotFound, ValidationFailed
from deskpool.identity.authenticator import identity_changed
from deskpool.identity.principal import Principal
from deskpool.identity.repository import grant as create_grant
from deskpool.identity.repository import parse_id, role_definitions
from deskpool.permissions import PermissionCatalog, builtin_roles

#: How many rendered /me bodies one API process keeps.
ME_BODIES_KEPT = 10_000

KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
PERMISSION_PATTERN = r"^[a-z_]+:(read|manage|admin)$"
_key = validate.Regexp(KEY_PATTERN, error="lowercase letters, digits, '.', '_' and '-'")
_permission = validate.Regexp(PERMISSION_PATTERN, error="a permission: <resource>:read|manage")


# ---------------------------------------------------------------------------------- schemas


class GroupRefSchema(Schema):
    """A group the caller belongs to."""

    id = fields.String(required=True)
    key = fields.String(required=True)
    via = fields.String(required=True, metadata={"description": "`member` or `claim`."})


class MeSchema(Schema):
    """The caller: identity, groups, roles and effective permissions."""

    id = fields.String(required=True)
    issuer = fields.String(required=True)
    subject = fields.String(required=True)
    email = fields.String(required=True, allow_none=True)
    display_name = fields.String(required=True, allow_none=True)
    groups = fields.List(fields.Nested(GroupRefSchema), required=True)
    roles = fields.List(fields.String(), required=True)
    permissions = fields.List(fields.String(), required=True)
    is_platform_admin = fields.Boolean(required=True)


class UserSchema(Schema):
    """A user, created at first sign-in."""

    id = fields.String(required=True)
    issuer = fields.String(required=True)
    subject = fields.String(required=True)
    email = fields.String(required=True, allow_none=True)
    display_name = fields.String(required=True, allow_none=True)
    disabled = fields.Boolean(required=True)
    created_at = fields.DateTime(required=True)
    last_seen_at = fields.DateTime(required=True)


class UserQuery(PageQuery):
    """Filters of the user list."""

    q = fields.String(metadata={"description": "Matches email or display name (substring)."})
    disabled = fields.Boolean()


class UserChangeSchema(Schema):
    """What an administrator may change on a user."""

    disabled = fields.Boolean(required=True)


class GroupSchema(Schema):
    """A local group."""

    id = fields.String(required=True)
    key = fields.String(required=True)
    name = fields.String(required=True)
    description = fields.String(required=True)
    created_at = fields.DateTime(required=True)


class GroupCreateSchema(Schema):
    """A new group."""

    key = fields.String(required=True, validate=_key)
    name = fields.String(required=True, validate=validate.Length(min=1, max=200))
    description = fields.String(load_default="", validate=validate.Length(max=2000))


class GroupChangeSchema(Schema):
    """Changes to a group."""

    name = fields.String(validate=validate.Length(min=1, max=200))
    description = fields.String(validate=validate.Length(max=2000))


class MemberSchema(Schema):
    """A member of a group."""

    user_id = fields.String(required=True)
    email = fields.String(required=True, allow_none=True)
    display_name = fields.String(required=True, allow_none=True)
    added_at = fields.DateTime(required=True)


class RoleSchema(Schema):
    """A role: a named set of permissions."""

    key = fields.String(required=True)
    description = fields.String(required=True)
    permissions = fields.List(fields.String(), required=True)
    builtin = fields.Boolean(required=True)


class RoleCreateSchema(Schema):
    """A new custom role."""

    key = fields.String(required=True, validate=_key)
    description = fields.String(load_default="", validate=validate.Length(max=2000))
    permissions = fields.List(
        fields.String(validate=_permission), required=True, validate=validate.Length(min=1)
    )


class RoleChangeSchema(Schema):
    """Changes to a custom role."""

    description = fields.String(validate=validate.Length(max=2000))
    permissions = fields.List(fields.String(validate=_permission), validate=validate.Length(min=1))


class GrantSchema(Schema):
    """A role or a single permission granted to a user or a group."""

    id = fields.String(required=True)
    subject_type = fields.String(required=True, metadata={"description": "`user` or `group`."})
    subject_id = fields.String(required=True)
    role_key = fields.String(required=True, allow_none=True)
    permission = fields.String(required=True, allow_none=True)
    source = fields.String(required=True, metadata={"description": "`api` or `bootstrap`."})
    created_at = fields.DateTime(required=True)


class GrantCreateSchema(Schema):
    """A new grant: exactly one of a role or a permission."""

    subject_type = fields.String(required=True, validate=validate.OneOf(["user", "group"]))
    subject_id = fields.UUID(required=True)
    role_key = fields.String(validate=_key)
    permission = fields.String(validate=_permission)


class GrantQuery(PageQuery):
    """Filters of the grant list."""

    subject_type = fields.String(validate=validate.OneOf(["user", "group"]))
    subject_id = fields.UUID()
    role_key = fields.String()


class BindingSchema(Schema):
    """An OIDC group claim value bound to a local group."""

    id = fields.String(required=True)
    claim_value = fields.String(required=True)
    group_id = fields.String(required=True)
    group_key = fields.String(required=True)
    source = fields.String(required=True, metadata={"description": "`api` or `bootstrap`."})
    created_at = fields.DateTime(required=True)


class BindingCreateSchema(Schema):
    """A new binding."""

    claim_value = fields.String(required=True, validate=validate.Length(min=1, max=500))
    group_id = fields.UUID(required=True)


class PermissionSchema(Schema):
    """A permission of the catalog."""

    name = fields.String(required=True)
    resource = fields.String(required=True)
    action = fields.String(required=True)


class PermissionListSchema(Schema):
    """The whole permission catalog."""

    items = fields.List(fields.Nested(PermissionSchema), required=True)


class AuditEventSchema(Schema):
    """One audit event."""

    id = fields.String(required=True)
    occurred_at = fields.DateTime(required=True)
    actor = fields.String(required=True)
    action = fields.String(required=True)
    resource_type = fields.String(required=True)
    resource_id = fields.String(required=True, allow_none=True)
    outcome = fields.String(required=True)
    request_id = fields.String(required=True, allow_none=True)
    source_address = fields.String(required=True, allow_none=True)
    details = fields.Dict(required=True)


class AuditQuery(PageQuery):
    """Filters of the audit trail."""

    since = fields.AwareDateTime(metadata={"description": "Events at or after this time."})
    until = fields.AwareDateTime(metadata={"description": "Events before this time."})
    actor = fields.String()
    action = fields.String()
    resource_type = fields.String()
    resource_id = fields.String()
    outcome = fields.String(validate=validate.OneOf(["success", "denied", "failure"]))


def _row(record: Any) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in dict(record).items()}


async def _audit(
    call: Call,
    connection: Any,
    action: str,
    resource_type: str,
    resource_id: str | None,
    **details: Any,
) -> None:
    await call.record_audit(connection, action, resource_type, resource_id, details)


# ----------------------------------------------------------------------------------- routes


def register(routes: RouteTable) -> None:
    """Add the identity and access operations."""
    me_schema = MeSchema()
    # The console asks for /me constantly: the body of a principal (which the authenticator
    # caches until anything about it changes) is rendered once. Keyed by the principal's
    # value, so a changed principal never gets another's body.
    me_bodies: dict[Principal, bytes] = {}

    async def get_me(call: Call) -> web.Response:
        principal: Principal = call.principal
        body = me_bodies.get(principal)
        if body is None:
            data = me_schema.dump(
                {
                    "id": principal.id,
                    "issuer": principal.issuer,
                    "subject": principal.subject,
                    "email": principal.email,
                    "display_name": principal.display_name,
                    "groups": [vars(group) for group in principal.groups],
                    "roles": sorted(principal.effective.roles),
                    "permissions": sorted(principal.effective.permissions),
                    "is_platform_admin": principal.effective.is_platform_admin,
                }
            )
            body = json.dumps(data).encode()
            if len(me_bodies) >= ME_BODIES_KEPT:
                me_bodies.clear()
            me_bodies[principal] = body
        return web.Response(body=body, content_type="application/json")

    routes.route(
        "GET",
        "/api/v1/me",
        summary="The caller: identity, groups, roles and effective permissions",
        tags=("me",),
        permission=None,
        authenticated=True,
        responses={200: ResponseSpec("The caller.", MeSchema)},
    )(get_me)

    @routes.route(
        "GET",
        "/api/v1/permissions",
        summary="The permission catalog",
        tags=("roles",),
        permission="roles:read",
        responses={200: ResponseSpec("Every permission.", PermissionListSchema)},
    )
    async def list_permissions(call: Call) -> dict[str, Any]:
        items = []
        for name in sorted(PermissionCatalog.builtin()):
            resource, _, action = name.partition(":")
            items.append({"name": name, "resource": resource, "action": action})
        return {"items": items}

    # -- users
    @routes.route(
        "GET",
        "/api/v1/users",
        summary="List users",
        tags=("users",),
        permission="users:read",
        query=UserQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of users.", page_schema(UserSchema))},
    )
    async def list_users(call: Call) -> Page:
        limit = call.query["limit"]
        after = decode_cursor(call.query.get("cursor"))
        conditions: list[str] = ["true"]
        args: list[Any] = []
        if after is not None:
            args.append(parse_id(str(after), "cursor"))
            conditions.append(f"id > ${len(args)}")
        if call.query.get("q"):
            args.append(f"%{call.query['q'].lower()}%")
            conditions.append(
                f"(lower(email) LIKE ${len(args)} OR lower(display_name) LIKE ${len(args)})"
            )
        if "disabled" in call.query:
            args.append(call.query["disabled"])
            conditions.append(f"disabled = ${len(args)}")
        args.append(limit + 1)
        rows = await call.runtime.db.fetch(
            f"SELECT * FROM users WHERE {' AND '.join(conditions)} ORDER BY id LIMIT ${len(args)}",
            *args,
        )
        return paginate([_row(r) for r in rows], limit, lambda r: r["id"])

    @routes.route(
        "GET",
        "/api/v1/users/{user_id}",
        summary="Get a user",
        tags=("users",),
        permission="users:read",
        responses={200: ResponseSpec("The user.", UserSchema)},
    )
    async def get_user(call: Call) -> dict[str, Any]:
        user_id = parse_id(call.path_param("user_id"), "user")
        row = await call.runtime.db.fetchrow("SELECT * FROM users WHERE id = $1", user_id)
        if row is None:
            raise NotFound(f"No user has the id {user_id}.")
        return _row(row)

    @routes.route(
        "PATCH",
        "/api/v1/users/{user_id}",
        summary="Disable or enable a user",
        tags=("users",),
        permission="users:manage",
        body=UserChangeSchema,
        responses={200: ResponseSpec("The user.", UserSchema)},
    )
    async def update_user(call: Call) -> dict[str, Any]:
        user_id = parse_id(call.path_param("user_id"), "user")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                "UPDATE users SET disabled = $2 WHERE id = $1 RETURNING *",
                user_id,
                call.body["disabled"],
            )
            if row is None:
                raise NotFound(f"No user has the id {user_id}.")
            action = "user.disable" if call.body["disabled"] else "user.enable"
            await _audit(call, connection, action, "users", str(user_id))
        await identity_changed(call.runtime)
        return _row(row)

    # -- groups
    @routes.route(
        "GET",
        "/api/v1/groups",
        summary="List groups",
        tags=("groups",),
        permission="groups:read",
        query=PageQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of groups.", page_schema(GroupSchema))},
    )
    async def list_groups(call: Call) -> Page:
        limit = call.query["limit"]
        after = decode_cursor(call.query.get("cursor"))
        rows = await call.runtime.db.fetch(
            "SELECT * FROM groups WHERE $1::text IS NULL OR key > $1 ORDER BY key LIMIT $2",
            None if after is None else str(after),
            limit + 1,
        )
        return paginate([_row(r) for r in rows], limit, lambda r: r["key"])

    @routes.route(
        "POST",
        "/api/v1/groups",
        summary="Create a group",
        tags=("groups",),
        permission="groups:manage",
        body=GroupCreateSchema,
        responses={201: ResponseSpec("The new group.", GroupSchema)},
    )
    async def create_group(call: Call) -> Reply:
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                """INSERT INTO groups (key, name, description) VALUES ($1, $2, $3)
                   ON CONFLICT (key) DO NOTHING RETURNING *""",
                call.body["key"],
                call.body["name"],
                call.body["description"],
            )
            if row is None:
                raise Conflict(f"A group with the key {call.body['key']!r} exists.")
            await _audit(call, connection, "group.create", "groups", str(row["id"]), key=row["key"])
        return Reply(_row(row), 201)

    @routes.route(
        "GET",
        "/api/v1/groups/{group_id}",
        summary="Get a group",
        tags=("groups",),
        permission="groups:read",
        responses={200: ResponseSpec("The group.", GroupSchema)},
    )
    async def get_group(call: Call) -> dict[str, Any]:
        group_id = parse_id(call.path_param("group_id"), "group")
        row = await call.runtime.db.fetchrow("SELECT * FROM groups WHERE id = $1", group_id)
        if row is None:
            raise NotFound(f"No group has the id {group_id}.")
        return _row(row)

    @routes.route(
        "PATCH",
        "/api/v1/groups/{group_id}",
        summary="Change a group",
        tags=("groups",),
        permission="groups:manage",
        body=GroupChangeSchema,
        responses={200: ResponseSpec("The group.", GroupSchema)},
    )
    async def update_group(call: Call) -> dict[str, Any]:
        group_id = parse_id(call.path_param("group_id"), "group")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                """UPDATE groups SET name = coalesce($2, name),
                          description = coalesce($3, description)
                   WHERE id = $1 RETURNING *""",
                group_id,
                call.body.get("name"),
                call.body.get("description"),
            )
            if row is None:
                raise NotFound(f"No group has the id {group_id}.")
            await _audit(
                call, connection, "group.update", "groups", str(group_id), fields=sorted(call.body)
            )
        return _row(row)

    @routes.route(
        "DELETE",
        "/api/v1/groups/{group_id}",
        summary="Delete a group (its members, grants and bindings go with it)",
        tags=("groups",),
        permission="groups:manage",
        responses={204: ResponseSpec("Deleted.")},
    )
    async def delete_group(call: Call) -> Reply:
        group_id = parse_id(call.path_param("group_id"), "group")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            key = await connection.fetchval(
                "DELETE FROM groups WHERE id = $1 RETURNING key", group_id
            )
            if key is None:
                raise NotFound(f"No group has the id {group_id}.")
            await connection.execute(
                "DELETE FROM grants WHERE subject_type = 'group' AND subject_id = $1", group_id
            )
            await connection.execute(
                "DELETE FROM pool_entitlements WHERE subject_type = 'group' AND subject_id = $1",
                group_id,
            )
            await _audit(call, connection, "group.delete", "groups", str(group_id), key=key)
        await identity_changed(call.runtime)
        return Reply(None, 204)

    @routes.route(
        "GET",
        "/api/v1/groups/{group_id}/members",
        summary="List the members of a group",
        tags=("groups",),
        permission="groups:read",
        query=PageQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of members.", page_schema(MemberSchema))},
    )
    async def list_group_members(call: Call) -> Page:
        group_id = parse_id(call.path_param("group_id"), "group")
        if not await call.runtime.db.fetchval("SELECT 1 FROM groups WHERE id = $1", group_id):
            raise NotFound(f"No group has the id {group_id}.")
        limit = call.query["limit"]
        after = decode_cursor(call.query.get("cursor"))
        rows = await call.runtime.db.fetch(
            """SELECT u.id AS user_id, u.email, u.display_name, m.added_at
                 FROM group_members m JOIN users u ON u.id = m.user_id
                WHERE m.group_id = $1 AND ($2::uuid IS NULL OR u.id > $2)
                ORDER BY u.id LIMIT $3""",
            group_id,
            None if after is None else parse_id(str(after), "cursor"),
            limit + 1,
        )
        return paginate([_row(r) for r in rows], limit, lambda r: r["user_id"])

    @routes.route(
        "PUT",
        "/api/v1/groups/{group_id}/members/{user_id}",
        summary="Add a user to a group",
        tags=("groups",),
        permission="groups:manage",
        responses={204: ResponseSpec("The user is a member.")},
    )
    async def add_group_member(call: Call) -> Reply:
        group_id = parse_id(call.path_param("group_id"), "group")
        user_id = parse_id(call.path_param("user_id"), "user")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            if not await connection.fetchval("SELECT 1 FROM groups WHERE id = $1", group_id):
                raise NotFound(f"No group has the id {group_id}.")
            if not await connection.fetchval("SELECT 1 FROM users WHERE id = $1", user_id):
                raise NotFound(f"No user has the id {user_id}.")
            added = await connection.fetchval(
                """INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)
                   ON CONFLICT DO NOTHING RETURNING 1""",
                group_id,
                user_id,
            )
            if added:
                await _audit(
                    call, connection, "group.member_add", "groups", str(group_id), user=str(user_id)
                )
        await identity_changed(call.runtime)
        return Reply(None, 204)

    @routes.route(
        "DELETE",
        "/api/v1/groups/{group_id}/members/{user_id}",
        summary="Remove a user from a group",
        tags=("groups",),
        permission="groups:manage",
        responses={204: ResponseSpec("The user is not a member.")},
    )
    async def remove_group_member(call: Call) -> Reply:
        group_id = parse_id(call.path_param("group_id"), "group")
        user_id = parse_id(call.path_param("user_id"), "user")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            removed = await connection.fetchval(
                "DELETE FROM group_members WHERE group_id = $1 AND user_id = $2 RETURNING 1",
                group_id,
                user_id,
            )
            if not removed:
                raise NotFound("That user is not a member of that group.")
            await _audit(
                call, connection, "group.member_remove", "groups", str(group_id), user=str(user_id)
            )
        await identity_changed(call.runtime)
        return Reply(None, 204)

    # -- roles
    @routes.route(
        "GET",
        "/api/v1/roles",
        summary="List roles (built-in and custom)",
        tags=("roles",),
        permission="roles:read",
        query=PageQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of roles.", page_schema(RoleSchema))},
    )
    async def list_roles(call: Call) -> Page:
        async with call.runtime.db.acquire() as connection:
            roles = await role_definitions(connection)
        after = decode_cursor(call.query.get("cursor"))
        items = [
            {
                "key": r.key,
                "description": r.description,
                "permissions": sorted(r.permissions),
                "builtin": r.key in builtin_roles(),
            }
            for key, r in sorted(roles.items())
            if after is None or key > str(after)
        ]
        return paginate(items[: call.query["limit"] + 1], call.query["limit"], lambda r: r["key"])

    def _check_permissions(names: list[str]) -> None:
        catalog = PermissionCatalog.builtin()
        bad = [
            FieldError(f"/permissions/{i}", f"unknown permission {n!r}")
            for i, n in enumerate(names)
            if n not in catalog
        ]
        if bad:
            raise ValidationFailed(bad)

    @routes.route(
        "POST",
        "/api/v1/roles",
        summary="Create a custom role",
        tags=("roles",),
        permission="roles:manage",
        body=RoleCreateSchema,
        responses={201: ResponseSpec("The new role.", RoleSchema)},
    )
    async def create_role(call: Call) -> Reply:
        key = call.body["key"]
        _check_permissions(call.body["permissions"])
        if key in builtin_roles():
            raise Conflict(f"{key!r} is a built-in role.")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                """INSERT INTO roles (key, description, permissions) VALUES ($1, $2, $3)
                   ON CONFLICT (key) DO NOTHING RETURNING key, description, permissions""",
                key,
                call.body["description"],
                sorted(set(call.body["permissions"])),
            )
            if row is None:
                raise Conflict(f"A role with the key {key!r} exists.")
            await _audit(
                call, connection, "role.create", "roles", key, permissions=list(row["permissions"])
            )
        return Reply({**dict(row), "builtin": False}, 201)

    @routes.route(
        "GET",
        "/api/v1/roles/{role_key}",
        summary="Get a role",
        tags=("roles",),
        permission="roles:read",
        responses={200: ResponseSpec("The role.", RoleSchema)},
    )
    async def get_role(call: Call) -> dict[str, Any]:
        key = call.path_param("role_key")
        async with call.runtime.db.acquire() as connection:
            role = (await role_definitions(connection)).get(key)
        if role is None:
            raise NotFound(f"No role has the key {key!r}.")
        return {
            "key": role.key,
            "description": role.description,
            "permissions": sorted(role.permissions),
            "builtin": key in builtin_roles(),
        }

    @routes.route(
        "PATCH",
        "/api/v1/roles/{role_key}",
        summary="Change a custom role",
        tags=("roles",),
        permission="roles:manage",
        body=RoleChangeSchema,
        responses={200: ResponseSpec("The role.", RoleSchema)},
    )
    async def update_role(call: Call) -> dict[str, Any]:
        key = call.path_param("role_key")
        if key in builtin_roles():
            raise Conflict(f"{key!r} is a built-in role and cannot be changed.")
        permissions = call.body.get("permissions")
        if permissions is not None:
            _check_permissions(permissions)
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                """UPDATE roles SET description = coalesce($2, description),
                          permissions = coalesce($3, permissions), updated_at = now()
                   WHERE key = $1 RETURNING key, description, permissions""",
                key,
                call.body.get("description"),
                sorted(set(permissions)) if permissions is not None else None,
            )
            if row is None:
                raise NotFound(f"No role has the key {key!r}.")
            await _audit(
                call, connection, "role.update", "roles", key, permissions=list(row["permissions"])
            )
        await identity_changed(call.runtime)
        return {**dict(row), "builtin": False}

    @routes.route(
        "DELETE",
        "/api/v1/roles/{role_key}",
        summary="Delete a custom role (its grants go with it)",
        tags=("roles",),
        permission="roles:manage",
        responses={204: ResponseSpec("Deleted.")},
    )
    async def delete_role(call: Call) -> Reply:
        key = call.path_param("role_key")
        if key in builtin_roles():
            raise Conflict(f"{key!r} is a built-in role and cannot be deleted.")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            if not await connection.fetchval("DELETE FROM roles WHERE key = $1 RETURNING 1", key):
                raise NotFound(f"No role has the key {key!r}.")
            await connection.execute("DELETE FROM grants WHERE role_key = $1", key)
            await _audit(call, connection, "role.delete", "roles", key)
        await identity_changed(call.runtime)
        return Reply(None, 204)

    # -- grants
    @routes.route(
        "GET",
        "/api/v1/grants",
        summary="List grants",
        tags=("roles",),
        permission="roles:read",
        query=GrantQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of grants.", page_schema(GrantSchema))},
    )
    async def list_grants(call: Call) -> Page:
        limit = call.query["limit"]
        after = decode_cursor(call.query.get("cursor"))
        rows = await call.runtime.db.fetch(
            """SELECT * FROM grants
                WHERE ($1::uuid IS NULL OR id > $1)
                  AND ($2::text IS NULL OR subject_type = $2)
                  AND ($3::uuid IS NULL OR subject_id = $3)
                  AND ($4::text IS NULL OR role_key = $4)
                ORDER BY id LIMIT $5""",
            None if after is None else parse_id(str(after), "cursor"),
            call.query.get("subject_type"),
            call.query.get("subject_id"),
            call.query.get("role_key"),
            limit + 1,
        )
        return paginate([_row(r) for r in rows], limit, lambda r: r["id"])

    @routes.route(
        "POST",
        "/api/v1/grants",
        summary="Grant a role or a permission to a user or a group",
        tags=("roles",),
        permission="roles:manage",
        body=GrantCreateSchema,
        responses={201: ResponseSpec("The grant.", GrantSchema)},
    )
    async def create_grant_operation(call: Call) -> Reply:
        role_key, permission = call.body.get("role_key"), call.body.get("permission")
        if (role_key is None) == (permission is None):
            raise ValidationFailed([FieldError("/", "Give exactly one of role_key or permission.")])
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await create_grant(
                connection,
                subject_type=call.body["subject_type"],
                subject_id=str(call.body["subject_id"]),
                role_key=role_key,
                permission=permission,
            )
            await _audit(
                call,
                connection,
                "grant.create",
                "roles",
                str(row["id"]),
                subject_type=row["subject_type"],
                subject_id=str(row["subject_id"]),
                role=role_key,
                permission=permission,
            )
        await identity_changed(call.runtime)
        return Reply(_row(row), 201)

    @routes.route(
        "DELETE",
        "/api/v1/grants/{grant_id}",
        summary="Revoke a grant",
        tags=("roles",),
        permission="roles:manage",
        responses={204: ResponseSpec("Revoked.")},
    )
    async def delete_grant(call: Call) -> Reply:
        grant_id = parse_id(call.path_param("grant_id"), "grant")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                "DELETE FROM grants WHERE id = $1 RETURNING *", grant_id
            )
            if row is None:
                raise NotFound(f"No grant has the id {grant_id}.")
            await _audit(
                call,
                connection,
                "grant.delete",
                "roles",
                str(grant_id),
                subject_type=row["subject_type"],
                subject_id=str(row["subject_id"]),
                role=row["role_key"],
                permission=row["permission"],
            )
        await identity_changed(call.runtime)
        return Reply(None, 204)

    # -- OIDC group bindings
    _binding_select = """SELECT b.id, b.claim_value, b.group_id, g.key AS group_key, b.source,
                                b.created_at
                           FROM oidc_group_bindings b JOIN groups g ON g.id = b.group_id"""

    @routes.route(
        "GET",
        "/api/v1/oidc-group-bindings",
        summary="List OIDC group claim bindings",
        tags=("roles",),
        permission="roles:read",
        query=PageQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of bindings.", page_schema(BindingSchema))},
    )
    async def list_bindings(call: Call) -> Page:
        limit = call.query["limit"]
        after = decode_cursor(call.query.get("cursor"))
        rows = await call.runtime.db.fetch(
            f"{_binding_select} WHERE $1::uuid IS NULL OR b.id > $1 ORDER BY b.id LIMIT $2",
            None if after is None else parse_id(str(after), "cursor"),
            limit + 1,
        )
        return paginate([_row(r) for r in rows], limit, lambda r: r["id"])

    @routes.route(
        "POST",
        "/api/v1/oidc-group-bindings",
        summary="Bind an OIDC group claim value to a local group",
        tags=("roles",),
        permission="roles:manage",
        body=BindingCreateSchema,
        responses={201: ResponseSpec("The binding.", BindingSchema)},
    )
    async def create_binding(call: Call) -> Reply:
        async with call.runtime.db.acquire() as connection, connection.transaction():
            if not await connection.fetchval(
                "SELECT 1 FROM groups WHERE id = $1", call.body["group_id"]
            ):
                raise Conflict(f"No group has the id {call.body['group_id']}.")
            binding_id = await connection.fetchval(
                """INSERT INTO oidc_group_bindings (claim_value, group_id) VALUES ($1, $2)
                   ON CONFLICT DO NOTHING RETURNING id""",
                call.body["claim_value"],
                call.body["group_id"],
            )
            if binding_id is None:
                raise Conflict("That claim value is already bound to that group.")
            row = await connection.fetchrow(f"{_binding_select} WHERE b.id = $1", binding_id)
            await _audit(
                call,
                connection,
                "oidc_group_binding.create",
                "roles",
                str(binding_id),
                claim_value=call.body["claim_value"],
                group=str(call.body["group_id"]),
            )
        await identity_changed(call.runtime)
        return Reply(_row(row), 201)

    @routes.route(
        "DELETE",
        "/api/v1/oidc-group-bindings/{binding_id}",
        summary="Delete an OIDC group claim binding",
        tags=("roles",),
        permission="roles:manage",
        responses={204: ResponseSpec("Deleted.")},
    )
    async def delete_binding(call: Call) -> Reply:
        binding_id = parse_id(call.path_param("binding_id"), "binding")
        async with call.runtime.db.acquire() as connection, connection.transaction():
            row = await connection.fetchrow(
                "DELETE FROM oidc_group_bindings WHERE id = $1 RETURNING claim_value, group_id",
                binding_id,
            )
            if row is None:
                raise NotFound(f"No binding has the id {binding_id}.")
            await _audit(
                call,
                connection,
                "oidc_group_binding.delete",
                "roles",
                str(binding_id),
                claim_value=row["claim_value"],
                group=str(row["group_id"]),
            )
        await identity_changed(call.runtime)
        return Reply(None, 204)

    # -- audit trail
    @routes.route(
        "GET",
        "/api/v1/audit-events",
        summary="List audit events, newest first",
        tags=("audit",),
        permission="audit:read",
        query=AuditQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of events.", page_schema(AuditEventSchema))},
    )
    async def list_audit_events(call: Call) -> Page:
        q = call.query
        limit = q["limit"]
        after = decode_cursor(q.get("cursor"))
        conditions = ["true"]
        args: list[Any] = []

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if after is not None:
            try:
                at, last_id = after
                cursor_time = datetime.fromisoformat(at)
                cursor_id = int(last_id)
            except (ValueError, TypeError):
                raise BadRequest("The cursor is not one this server issued.") from None
            conditions.append(f"(occurred_at, id) < ({arg(cursor_time)}, {arg(cursor_id)})")
        for name, column, op in (
            ("since", "occurred_at", ">="),
            ("until", "occurred_at", "<"),
            ("actor", "actor", "="),
            ("action", "action", "="),
            ("resource_type", "resource_type", "="),
            ("resource_id", "resource_id", "="),
            ("outcome", "outcome", "="),
        ):
            if q.get(name) is not None:
                conditions.append(f"{column} {op} {arg(q[name])}")
        rows = await call.runtime.db.fetch(
            f"""SELECT * FROM audit_events WHERE {" AND ".join(conditions)}
                ORDER BY occurred_at DESC, id DESC LIMIT {arg(limit + 1)}""",
            *args,
        )
        items = [{**_row(r), "details": json.loads(r["details"])} for r in rows]
        return paginate(items, limit, lambda r: [r["occurred_at"].isoformat(), r["id"]])
