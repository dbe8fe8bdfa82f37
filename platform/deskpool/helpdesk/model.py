"""Whether a user can open a pool now, and why (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID


class Access(StrEnum):
    """The answer for one pool: the first four can open it, the others cannot."""

    #: He holds a desktop there: opening reconnects to it.
    HOLDS_DESKTOP = "holds_desktop"
    #: A free ready desktop is there for him.
    AVAILABLE = "available"
    #: None is ready, but one is started for him (start on connect: the open answers 202).
    STARTABLE = "startable"
    NOT_ENTITLED = "not_entitled"
    USER_DISABLED = "user_disabled"
    POOL_DISABLED = "pool_disabled"
    POOL_DRAINING = "pool_draining"
    LICENSE_LIMIT = "license_limit"
    NO_DESKTOP_AVAILABLE = "no_desktop_available"

    @property
    def can_open(self) -> bool:
        """Whether opening the pool gives him a desktop now (or starts one)."""
        return self in (Access.HOLDS_DESKTOP, Access.AVAILABLE, Access.STARTABLE)


#: What the help desk says of each answer.
EXPLANATIONS: dict[Access, str] = {
    Access.HOLDS_DESKTOP: "He holds a desktop in this pool; opening it reconnects him to it.",
    Access.AVAILABLE: "A ready desktop is free for him.",
    Access.STARTABLE: "No desktop is ready, but one is started for him when he opens the pool.",
    Access.NOT_ENTITLED: (
        "He is not entitled to this pool: neither directly nor through a group he belongs to "
        "or a claim of his last sign-in binds him to."
    ),
    Access.USER_DISABLED: "His account is disabled: he can open no pool.",
    Access.POOL_DISABLED: "The pool is disabled: it gives out no desktop.",
    Access.POOL_DRAINING: "The pool is draining: it gives out no new desktop.",
    Access.LICENSE_LIMIT: "The license's session limit is reached: no new session can open.",
    Access.NO_DESKTOP_AVAILABLE: (
        "No desktop is free or can be started now, and the pool cannot give him one until one "
        "is built or freed."
    ),
}


@dataclass(frozen=True, slots=True)
class Path:
    """One way a user is entitled to a pool.

    :ivar kind: ``direct`` (an entitlement of the user), ``group`` (of a group he is a member
        of), ``claim`` (of a group bound to a claim of his last sign-in), ``permission`` (he
        holds ``pools:manage``, which may open any pool).
    """

    kind: str
    group_id: UUID | None = None
    group_key: str | None = None

    def view(self) -> dict[str, Any]:
        """The path as the API shows it."""
        return {
            "kind": self.kind,
            "group_id": None if self.group_id is None else str(self.group_id),
            "group_key": self.group_key,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolFacts:
    """What decides whether the user can open the pool."""

    user_disabled: bool
    pool_state: str
    paths: tuple[Path, ...]
    holds_desktop: bool
    available: int
    startable: int
    sessions_at_limit: bool


def judge(facts: PoolFacts) -> Access:
    """The answer for one pool, in the order the opening itself checks."""
    if facts.user_disabled:
        return Access.USER_DISABLED
    if not facts.paths:
        return Access.NOT_ENTITLED
    if facts.pool_state == "disabled":
        return Access.POOL_DISABLED
    if facts.pool_state == "draining" and not facts.holds_desktop:
        return Access.POOL_DRAINING
    if facts.holds_desktop:
        return Access.HOLDS_DESKTOP
    if facts.sessions_at_limit:
        return Access.LICENSE_LIMIT
    if facts.available > 0:
        return Access.AVAILABLE
    if facts.startable > 0:
        return Access.STARTABLE
    return Access.NO_DESKTOP_AVAILABLE
