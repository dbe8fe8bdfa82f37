"""Rows a test seeds directly, as a first sign-in and an administrator would have made them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from deskpool.runtime import Runtime


async def seed_user(
    runtime: Runtime, issuer: str, subject: str, *permissions: str, groups: Sequence[str] = ()
) -> str:
    """Create a user (as a first sign-in would) holding ``permissions``, in ``groups``."""
    async with runtime.db.acquire() as connection:
        user_id = await connection.fetchval(
            "INSERT INTO users (issuer, subject) VALUES ($1, $2) RETURNING id", issuer, subject
        )
        for permission in permissions:
            await connection.execute(
                "INSERT INTO grants (subject_type, subject_id, permission) VALUES ('user', $1, $2)",
                user_id,
                permission,
            )
        for group_id in groups:
            await connection.execute(
                "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)",
                uuid.UUID(group_id),
                user_id,
            )
    return str(user_id)
