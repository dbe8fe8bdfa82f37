"""The commands of the pool use cases: typed values the API's edge makes, the services take.

A command holds model values (enums, UUIDs, tuples), never a request body: the API's schema
checks the document, its handler turns it into a command (``deskpool.api.resources.pools``),
and :mod:`deskpool.pool_admin.service` validates the command against the stored pool. A change
(:class:`ChangePool`) holds each member as ``T | Unset``: :data:`~deskpool.unset.UNSET` keeps
the stored value.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskpool.pools.model import CloneMode, OsType, PoolKind, PoolState
from deskpool.pools.store import DomainJoin
from deskpool.secrets import SecretValue
from deskpool.unset import UNSET, Unset, given

if TYPE_CHECKING:  # a pool's session policy is the sessions area's model: named, not imported
    from deskpool.sessions.model import PolicyChange

#: The members of a command that are members of the pool model itself.
_MODEL_MEMBERS = (
    "name",
    "cluster_id",
    "template",
    "kind",
    "os_type",
    "clone_mode",
    "min_size",
    "max_size",
    "spare",
    "naming_pattern",
    "target_nodes",
    "storage",
    "schedule_id",
    "state",
)


@dataclass(frozen=True, kw_only=True)
class DomainJoinInput:
    """Active Directory join settings as given: the settings, and a password when given."""

    settings: DomainJoin
    password: SecretValue | None = None


@dataclass(frozen=True, kw_only=True)
class CreatePool:
    """A new pool."""

    name: str
    description: str = ""
    cluster_id: uuid.UUID
    template: str
    kind: PoolKind
    os_type: OsType
    clone_mode: CloneMode = CloneMode.LINKED
    min_size: int = 0
    max_size: int
    spare: int = 0
    naming_pattern: str
    target_nodes: tuple[str, ...] = ()
    storage: str | None = None
    schedule_id: uuid.UUID | None = None
    state: PoolState = PoolState.ENABLED
    domain_join: DomainJoinInput | None = None
    session_policy: PolicyChange | None = None

    def model_members(self) -> dict[str, Any]:
        """The members of the pool model this command sets, by name."""
        return {name: getattr(self, name) for name in _MODEL_MEMBERS}


@dataclass(frozen=True, kw_only=True)
class ChangePool:
    """Changes to a pool: members left :data:`UNSET` stay as they are."""

    name: str | Unset = UNSET
    description: str | Unset = UNSET
    cluster_id: uuid.UUID | Unset = UNSET
    template: str | Unset = UNSET
    kind: PoolKind | Unset = UNSET
    os_type: OsType | Unset = UNSET
    clone_mode: CloneMode | Unset = UNSET
    min_size: int | Unset = UNSET
    max_size: int | Unset = UNSET
    spare: int | Unset = UNSET
    naming_pattern: str | Unset = UNSET
    target_nodes: tuple[str, ...] | Unset = UNSET
    storage: str | Unset | None = UNSET
    schedule_id: uuid.UUID | Unset | None = UNSET
    state: PoolState | Unset = UNSET
    #: ``None`` removes the join settings and the password.
    domain_join: DomainJoinInput | Unset | None = UNSET
    session_policy: PolicyChange | Unset = UNSET

    @property
    def members(self) -> frozenset[str]:
        """The names of the members this change sets."""
        return frozenset(given(self))

    def model_changes(self) -> dict[str, Any]:
        """The members of the pool model this change sets, by name."""
        return {name: getattr(self, name) for name in _MODEL_MEMBERS if name in self.members}
