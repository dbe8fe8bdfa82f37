"""Request and response schemas of the identity resources.

Me, users, groups, roles, grants, OIDC group bindings and the audit trail.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate, validates_schema

from deskpool.api.pagination import PageQuery
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.labels import email_field, name_field
from deskpool.api.routes import ResponseSpec
from deskpool.api.validation import require_exactly_one
from deskpool.api.values import Instant
from deskpool.identity.kinds import HUMAN, SERVICE, UNSETTLED
from deskpool.permissions import PermissionCatalog

#: What a user may be (:mod:`deskpool.identity.kinds`).
USER_KINDS = (HUMAN, SERVICE, UNSETTLED)

KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
_key = validate.Regexp(KEY_PATTERN, error="lowercase letters, digits, '.', '_' and '-'")
#: A permission of the catalog (the document lists them as an ``enum``).
_permission = validate.OneOf(
    PermissionCatalog.builtin().names(), error="unknown permission {input!r}"
)
_GRANT_SOURCE = (
    "`api`, `bootstrap` (a bootstrap admin's first sign-in) or `break_glass` "
    "(`deskpool admin grant`)."
)
_BINDING_SOURCE = "`api`, or `bootstrap` (from AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS)."


class GroupRefSchema(Schema):
    """A group the caller belongs to."""

    id = fields.String(required=True)
    key = fields.String(required=True)
    via = fields.String(required=True, metadata={"description": "`member` or `claim`."})


class _PersonSchema(Schema):
    """Who a user is: the members the caller's own view and a user's share."""

    id = fields.String(required=True)
    issuer = fields.String(required=True)
    subject = fields.String(required=True)
    email = fields.String(required=True, allow_none=True)
    display_name = fields.String(required=True, allow_none=True)
    kind = fields.String(
        required=True,
        validate=validate.OneOf(USER_KINDS),
        metadata={
            "description": "`human`: a person who signed in. `service`: a client that obtained "
            "its own token (client credentials grant); a person and a client with the same "
            "`subject` are two users. `unsettled`: stored before users had kinds, until its "
            "next sign-in gives it that sign-in's kind."
        },
    )


class MeSchema(_PersonSchema):
    """The caller: identity, groups, roles and effective permissions."""

    groups = fields.List(fields.Nested(GroupRefSchema), required=True)
    roles = fields.List(fields.String(), required=True)
    permissions = fields.List(fields.String(), required=True)
    is_platform_admin = fields.Boolean(required=True)


class UserSchema(_PersonSchema):
    """A user, created at first sign-in."""

    disabled = fields.Boolean(required=True)
    created_at = fields.DateTime(required=True)
    last_seen_at = fields.DateTime(required=True)


class UserQuery(PageQuery):
    """Filters of the user list."""

    q = fields.String(metadata={"description": "Matches email or display name (substring)."})
    disabled = fields.Boolean()


class UserCreateSchema(Schema):
    """A person added before their first sign-in, by the issuer's subject."""

    subject = fields.String(
        required=True,
        validate=validate.Length(min=1, max=255),
        metadata={"description": "The person's `sub` at the identity provider."},
    )
    display_name = fields.String(
        validate=validate.Length(min=1, max=200),
        metadata={"description": "How to show them until their first sign-in names them."},
    )
    issuer = fields.String(
        validate=validate.Length(min=1, max=2000),
        metadata={"description": "The subject's issuer; by default the caller's own."},
    )


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
    source = fields.String(required=True, metadata={"description": _GRANT_SOURCE})
    created_at = fields.DateTime(required=True)
    subject_name = fields.String(
        allow_none=True,
        metadata={"description": "The user's display name (else email) or the group's name."},
    )
    subject_email = email_field("A user subject", required=False)


class GrantCreateSchema(Schema):
    """A new grant: exactly one of a role (`role_key`) or a permission (`permission`)."""

    class Meta:
        """The document states the rule with ``oneOf`` (see :mod:`deskpool.api.openapi`)."""

        exactly_one_of = ("role_key", "permission")

    subject_type = fields.String(required=True, validate=validate.OneOf(["user", "group"]))
    subject_id = fields.UUID(required=True)
    role_key = fields.String(validate=_key)
    permission = fields.String(validate=_permission)

    @validates_schema
    def _one_of_role_or_permission(self, data: dict[str, Any], **_: Any) -> None:
        require_exactly_one(data, self.Meta.exactly_one_of)


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
    source = fields.String(required=True, metadata={"description": _BINDING_SOURCE})
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
    actor_name = name_field("The acting user (null for the platform's own actors)")
    actor_email = email_field("The acting user")
    resource_name = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The resource's name, when it has one and still exists."},
    )
    names = fields.Dict(
        keys=fields.String(),
        values=fields.String(),
        required=True,
        metadata={
            "description": "The names of the users, groups, pools, desktops, clusters and "
            "schedules the details mention by id, by id."
        },
    )


class AuditQuery(PageQuery):
    """Filters of the audit trail."""

    since = Instant(metadata={"description": "Events at or after this time."})
    until = Instant(metadata={"description": "Events before this time."})
    actor = fields.String(
        metadata={
            "description": "The actor's id, or a user's email, or part of a user's display name."
        }
    )
    action = fields.String()
    resource_type = fields.String()
    resource_id = fields.String()
    outcome = fields.String(validate=validate.OneOf(["success", "denied", "failure"]))


def problems(forbidden: str | None = None, conflict: str | None = None) -> dict[int, ResponseSpec]:
    """The 403 and 409 an identity change documents beyond the permission check.

    :param forbidden: what the change confers, refused with ``escalation_denied``.
    :param conflict: the conflicts it can meet (``last_platform_admin``...).
    """
    declared: dict[int, ResponseSpec] = {}
    if forbidden is not None:
        declared[403] = ResponseSpec(
            f"The caller lacks the operation's permission (`forbidden`), or does not hold every "
            f"permission {forbidden} would confer (`escalation_denied`; the permissions are "
            "listed in `missing_permissions`).",
            ProblemSchema,
            content_type=PROBLEM_CONTENT_TYPE,
        )
    if conflict is not None:
        declared[409] = ResponseSpec(conflict, ProblemSchema, content_type=PROBLEM_CONTENT_TYPE)
    return declared


#: The 409 of a change that could remove the last enabled platform admin.
LAST_ADMIN = "no enabled platform admin would be left (`last_platform_admin`)"
