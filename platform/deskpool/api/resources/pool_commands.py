"""Pool requests, checked by their schemas, as the typed commands the pool services take.

The schemas (:mod:`deskpool.api.resources.pool_schemas`) check each member's shape and range;
this module turns the loaded document into :class:`~deskpool.pools.commands.CreatePool` or
:class:`~deskpool.pools.commands.ChangePool`, with model values (enums, tuples) instead of
JSON. A member absent from a change document is :data:`~deskpool.unset.UNSET`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskpool.client_policy.model import ClientPolicyChange
from deskpool.pools.commands import ChangePool, CreatePool, DomainJoinInput
from deskpool.pools.model import CloneMode, OsType, PoolKind, PoolState
from deskpool.pools.store import DomainJoin
from deskpool.sessions.model import NO_CLIENT_CHANGE, AfterDisconnect, DisplayProtocol, PolicyChange
from deskpool.unset import UNSET

#: Members whose JSON value becomes a model value by a conversion.
_CONVERSIONS: dict[str, Any] = {
    "kind": PoolKind,
    "os_type": OsType,
    "clone_mode": CloneMode,
    "state": PoolState,
    "target_nodes": tuple,
}
#: Members taken as the schema loaded them.
_PLAIN = (
    "name",
    "description",
    "cluster_id",
    "template",
    "min_size",
    "max_size",
    "spare",
    "naming_pattern",
    "storage",
    "schedule_id",
)


def policy_change(document: Mapping[str, Any]) -> PolicyChange:
    """A loaded ``SessionPolicyInput`` document as a :class:`PolicyChange`."""
    recording = document.get("recording") or {}
    return PolicyChange(
        protocol=DisplayProtocol(document["protocol"]) if "protocol" in document else UNSET,
        after_disconnect=(
            AfterDisconnect(document["after_disconnect"])
            if "after_disconnect" in document
            else UNSET
        ),
        logoff_delay=document.get("logoff_delay", UNSET),
        idle_timeout=document.get("idle_timeout", UNSET),
        max_session_duration=document.get("max_session_duration", UNSET),
        recording_enabled=recording.get("enabled", UNSET),
        recording_include_keys=recording.get("include_keys", UNSET),
        client=ClientPolicyChange(document["client"]) if "client" in document else NO_CLIENT_CHANGE,
    )


def _domain_join(document: Mapping[str, Any] | None) -> DomainJoinInput | None:
    if document is None:
        return None
    return DomainJoinInput(
        settings=DomainJoin(
            domain=document["domain"],
            username=document["username"],
            organizational_unit=document.get("organizational_unit"),
        ),
        password=document.get("password"),
    )


def _members(body: Mapping[str, Any]) -> dict[str, Any]:
    members: dict[str, Any] = {name: body[name] for name in _PLAIN if name in body}
    for name, convert in _CONVERSIONS.items():
        if name in body:
            members[name] = convert(body[name])
    if "domain_join" in body:
        members["domain_join"] = _domain_join(body["domain_join"])
    if "session_policy" in body:
        members["session_policy"] = policy_change(body["session_policy"])
    return members


def create_pool_command(body: Mapping[str, Any]) -> CreatePool:
    """A loaded ``PoolCreate`` document as a command."""
    return CreatePool(**_members(body))


def change_pool_command(body: Mapping[str, Any]) -> ChangePool:
    """A loaded ``PoolChange`` document as a command."""
    return ChangePool(**_members(body))
