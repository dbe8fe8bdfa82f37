"""Live events and who may see them: plain data and rules, no I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from deskpool.permissions import PLATFORM_ADMIN

#: The resource kinds that have live events, with the permissions that let a caller see any
#: event of that kind (an owner sees their own even without them).
READ_PERMISSIONS: Mapping[str, tuple[str, ...]] = {
    "desktop": ("desktops:read", "pools:read"),
    "pool": ("pools:read",),
    "job": ("jobs:read",),
    "session": ("sessions:read",),
    "cluster": ("clusters:read",),
    "user": ("users:read",),
    "group": ("groups:read",),
    "role": ("roles:read",),
    "grant": ("roles:read",),
    "license": ("license:read",),
    "message": ("sessions:read",),
}

#: The singular kind of each resource of the permission model (``pools`` → ``pool``).
KIND_OF_RESOURCE: Mapping[str, str] = {
    "desktops": "desktop",
    "pools": "pool",
    "jobs": "job",
    "sessions": "session",
    "clusters": "cluster",
    "users": "user",
    "groups": "group",
    "roles": "role",
    "license": "license",
}


@dataclass(frozen=True)
class LiveEvent:
    """One change, as streamed.

    :param type: ``<kind>.<what>``: ``desktop.state``, ``pool.changed``, ``job.dead``...
    :param resource_id: the changed object's id.
    :param data: what a screen needs to show the change (never a secret).
    :param owner: the user the object belongs to, who sees the event without a permission.
    """

    type: str
    resource_id: str
    data: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None

    @property
    def kind(self) -> str:
        """The resource kind (the part of the type before the dot)."""
        return self.type.partition(".")[0]

    def fields(self) -> dict[str, str]:
        """The event as the fields of a Redis stream entry."""
        return {
            "type": self.type,
            "id": self.resource_id,
            "owner": self.owner or "",
            "data": json.dumps(self.data, separators=(",", ":"), default=str),
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> LiveEvent:
        """Read back :meth:`fields`."""
        return cls(
            type=fields.get("type", ""),
            resource_id=fields.get("id", ""),
            data=dict(json.loads(fields.get("data") or "{}")),
            owner=fields.get("owner") or None,
        )

    def body(self) -> dict[str, Any]:
        """The JSON ``data`` of the server-sent event."""
        return {"type": self.type, "id": self.resource_id, **self.data}


def may_see(event: LiveEvent, permissions: frozenset[str] | set[str], user_id: str) -> bool:
    """Whether a caller with ``permissions`` (and id ``user_id``) may receive ``event``."""
    if PLATFORM_ADMIN in permissions:
        return True
    if event.owner is not None and event.owner == user_id:
        return True
    needed = READ_PERMISSIONS.get(event.kind)
    return needed is not None and any(permission in permissions for permission in needed)


#: What a user entitled to a pool receives for a change of a desktop of it he may not see.
AVAILABILITY_EVENT = "pool.availability"


def view_for(
    event: LiveEvent,
    permissions: frozenset[str] | set[str],
    user_id: str,
    entitled_pools: Collection[str] = (),
) -> LiveEvent | None:
    """What a caller receives of ``event``: the event, an availability hint, or nothing.

    A desktop user sees the events of his own desktops (:func:`may_see`). A change of another
    desktop of a pool he is entitled to (``entitled_pools``), or of the pool itself (changed
    through the API, or reconciled: desktops created, powered off or on), reaches him as
    ``pool.availability``: the pool's id only, so his pool list refreshes (a desktop became
    ready, or was taken) without telling him whose desktop changed or how.
    """
    if may_see(event, permissions, user_id):
        return event
    if event.kind == "desktop":
        pool_id = event.data.get("pool_id")
    elif event.kind == "pool" and event.type != AVAILABILITY_EVENT:
        pool_id = event.resource_id
    else:
        return None
    if not isinstance(pool_id, str) or pool_id not in entitled_pools:
        return None
    return LiveEvent(AVAILABILITY_EVENT, pool_id, {"pool_id": pool_id}, owner=user_id)


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """A Redis stream id (``<ms>-<seq>``) as a sortable pair; ``(-1, -1)`` if malformed."""
    milliseconds, _, sequence = stream_id.partition("-")
    try:
        return int(milliseconds), int(sequence or 0)
    except ValueError:
        return -1, -1


#: A stream id as Redis writes it: ASCII digits, a dash, ASCII digits (the sequence optional).
_STREAM_ID = re.compile(r"[0-9]{1,20}(?:-[0-9]{1,20})?", re.ASCII)
#: The largest part of a stream id Redis accepts (an unsigned 64-bit integer).
MAX_STREAM_ID_PART = 2**64 - 1


def valid_stream_id(stream_id: str) -> bool:
    """Whether ``stream_id`` is a stream id Redis accepts to resume after (``Last-Event-ID``).

    ASCII digits only (``int`` would take other scripts' digits, signs and underscores), each
    part at most 2^64-1, and not the very last id (nothing can follow it: Redis refuses it as
    the exclusive start of a range).
    """
    if _STREAM_ID.fullmatch(stream_id) is None:
        return False
    milliseconds, _, sequence = stream_id.partition("-")
    key = (int(milliseconds), int(sequence or 0))
    return max(key) <= MAX_STREAM_ID_PART and key != (MAX_STREAM_ID_PART, MAX_STREAM_ID_PART)


class StreamSlots:
    """How many event streams each user holds open in this process, up to a limit each."""

    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._held: dict[str, int] = {}

    def take(self, user_id: str) -> bool:
        """Count one more stream of ``user_id``; ``False`` (nothing counted) at the limit."""
        held = self._held.get(user_id, 0)
        if held >= self.per_user:
            return False
        self._held[user_id] = held + 1
        return True

    def give_back(self, user_id: str) -> None:
        """A stream of ``user_id`` ended."""
        held = self._held.get(user_id, 0) - 1
        if held > 0:
            self._held[user_id] = held
        else:
            self._held.pop(user_id, None)

    def held(self, user_id: str) -> int:
        """How many streams ``user_id`` holds open."""
        return self._held.get(user_id, 0)
