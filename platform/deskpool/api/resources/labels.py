"""Names where a response would otherwise show only ids: the users and pools of a page.

A page of sessions, desktops or images names its users and pools with one query each
(:func:`labels_for`), never one per row, and the console never looks them up itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marshmallow import fields

from deskpool.identity.user_state import UserLabel, user_labels
from deskpool.pools.lookups import pool_names

if TYPE_CHECKING:
    from deskpool.runtime import Runtime


@dataclass(frozen=True)
class Labels:
    """The names of the users and pools a page shows, by id."""

    users: dict[uuid.UUID, UserLabel] = field(default_factory=dict)
    pools: dict[uuid.UUID, str] = field(default_factory=dict)

    def label(self, user_id: uuid.UUID | str | None) -> UserLabel | None:
        """The label of a user (``None`` for an unknown user or an actor that is no user)."""
        key = None if user_id is None else _as_uuid(user_id)
        return None if key is None else self.users.get(key)

    def name(self, user_id: uuid.UUID | str | None) -> str | None:
        """The name of a user (``None`` when unknown)."""
        label = self.label(user_id)
        return None if label is None else label.name

    def user(self, prefix: str, user_id: uuid.UUID | str | None) -> dict[str, Any]:
        """``<prefix>_name`` and ``<prefix>_email`` of a user (``None`` when unknown)."""
        label = self.label(user_id)
        return {
            f"{prefix}_name": None if label is None else label.name,
            f"{prefix}_email": None if label is None else label.email,
        }

    def pool(self, pool_id: uuid.UUID | str) -> dict[str, Any]:
        """``pool_name`` of a pool (``None`` when it no longer exists)."""
        key = _as_uuid(pool_id)
        return {"pool_name": None if key is None else self.pools.get(key)}


#: No names (a response whose users and pools are not named).
NO_LABELS = Labels()


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


async def labels_for(
    runtime: Runtime,
    *,
    users: Iterable[uuid.UUID | str | None] = (),
    pools: Iterable[uuid.UUID | str] = (),
) -> Labels:
    """The labels of ``users`` and ``pools``, one query each.

    Ids that are not UUIDs (the platform's own actors, ``system:...``) are left unnamed.
    """
    user_ids = {_as_uuid(user) for user in users if user is not None}
    pool_ids = {pool for pool in map(_as_uuid, pools) if pool is not None}
    return Labels(
        await user_labels(runtime.db, user_ids),
        await pool_names(runtime, pool_ids),
    )


def name_field(who: str) -> fields.String:
    """The schema field of a user's name (``who`` says which user)."""
    return fields.String(
        required=True,
        allow_none=True,
        metadata={"description": f"{who}: display name, else email (null when unknown)."},
    )


def email_field(who: str, *, required: bool = True) -> fields.String:
    """The schema field of a user's email (``who`` says which user)."""
    return fields.String(
        required=required, allow_none=True, metadata={"description": f"{who}: email."}
    )


def pool_name_field() -> fields.String:
    """The schema field of a pool's name."""
    return fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The pool's name (null once the pool is deleted)."},
    )
