"""What the outage snapshot and journal hold, as plain records (no I/O).

The snapshot (kept in Redis while the database answers) and the journal (acts done while it
does not) are made of these records, each written as JSON text or as a stream entry's fields:

- :class:`RememberedPrincipal`: a user as of his last sign-in (or the snapshot's last
  refresh): enough to accept a token of a known user and to judge his access;
- :class:`SnapshotPool`: a pool's entitlements (users and groups) and the limits its
  sessions carry; a pool that records its sessions is never brokered without the database;
- :class:`SnapshotDesktop`: a desktop that can be handed out or reconnected to, with its
  connection target sealed by the secret store;
- :class:`Act`: one entry of the journal.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from deskpool.events import AuditEvent, outcome_of
from deskpool.identity.principal import GroupRef, Principal
from deskpool.permissions import EffectivePermissions
from deskpool.pools.model import Desktop, DesktopState

#: How long a desktop handed out while the database answered is kept out of the snapshot's
#: ready desktops, whatever a refresh read before that (milliseconds).
TAKEN_FOR_MS = 60_000


class Keys:
    """The Redis keys of the snapshot and the journal, under ``<KVSTORE_KEY_PREFIX>outage:``."""

    def __init__(self, prefix: str) -> None:
        base = f"{prefix}outage:"
        #: user id -> :class:`RememberedPrincipal` JSON.
        self.principals = f"{base}principals"
        #: ``issuer\\x1fsubject\\x1fkind`` -> user id.
        self.subjects = f"{base}subjects"
        #: pool id -> :class:`SnapshotPool` JSON.
        self.pools = f"{base}pools"
        #: desktop id -> :class:`SnapshotDesktop` JSON.
        self.desktops = f"{base}desktops"
        #: desktop id -> the user who holds it.
        self.holders = f"{base}holders"
        #: ``user|pool`` -> the desktop the user holds in the pool.
        self.held = f"{base}held"
        #: Desktops counted against the license's sessions (a session or a token).
        self.counted = f"{base}counted"
        #: ``limit``: the license's concurrent sessions (empty: no limit).
        self.license = f"{base}license"
        #: desktop id -> until when (ms) it stays out of the ready desktops.
        self.taken = f"{base}taken"
        #: The journal (a stream).
        self.journal = f"{base}journal"
        #: How many acts were journaled (a refresh installs only if none came meanwhile).
        self.acts = f"{base}acts"
        #: Grows with every change that took access away; the snapshot is fresh while
        #: :attr:`refreshed_epoch` equals it.
        self.epoch = f"{base}epoch"
        #: user id -> the revocation (:attr:`revocations`) that took access from him since
        #: the snapshot was read: he is served nothing from it until it is read again.
        self.revoked = f"{base}revoked"
        self.revocations = f"{base}revocations"
        self.refreshed_epoch = f"{base}refreshed_epoch"
        self.refreshed_at = f"{base}refreshed_at"
        self._base = base

    def ready(self, pool_id: uuid.UUID | str) -> str:
        """The set of a pool's ready desktops (free, clean, with a known target)."""
        return f"{self._base}ready:{pool_id}"

    def token(self, key: bytes) -> str:
        """A connection token issued from the snapshot, by the SHA-256 of the token."""
        return f"{self._base}token:{key.hex()}"


def subject_key(issuer: str, subject: str, kind: str) -> str:
    """Who signs in, as :attr:`Keys.subjects` names it."""
    return f"{issuer}\x1f{subject}\x1f{kind}"


def held_key(user_id: str, pool_id: uuid.UUID | str) -> str:
    """A field of :attr:`Keys.held`."""
    return f"{user_id}|{pool_id}"


# ------------------------------------------------------------------------------ principals


@dataclass(frozen=True)
class RememberedPrincipal:
    """A principal as remembered for an outage (and when)."""

    principal: Principal

    def to_json(self) -> str:
        """The JSON text kept in Redis."""
        p = self.principal
        return json.dumps(
            {
                "id": p.id,
                "issuer": p.issuer,
                "subject": p.subject,
                "email": p.email,
                "display_name": p.display_name,
                "disabled": p.disabled,
                "groups": [[g.id, g.key, g.via] for g in p.groups],
                "claimed_groups": list(p.claimed_groups),
                "claimed_roles": list(p.claimed_roles),
                "permissions": sorted(p.effective.permissions),
                "roles": sorted(p.effective.roles),
                "unknown_roles": sorted(p.effective.unknown_roles),
                "kind": p.kind,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> RememberedPrincipal:
        """Read what :meth:`to_json` wrote."""
        d = json.loads(text)
        return cls(
            Principal(
                id=str(d["id"]),
                issuer=str(d["issuer"]),
                subject=str(d["subject"]),
                email=d["email"],
                display_name=d["display_name"],
                disabled=bool(d["disabled"]),
                groups=tuple(GroupRef(*g) for g in d["groups"]),
                claimed_groups=tuple(d["claimed_groups"]),
                claimed_roles=tuple(d["claimed_roles"]),
                effective=EffectivePermissions(
                    frozenset(d["permissions"]),
                    frozenset(d["roles"]),
                    frozenset(d["unknown_roles"]),
                ),
                kind=str(d["kind"]),
            )
        )

    def matches(self, claimed_groups: tuple[str, ...], claimed_roles: tuple[str, ...]) -> bool:
        """Whether a token's groups and roles are those the principal was resolved with.

        A token with other groups or roles may mean other permissions: it is not accepted
        from the snapshot (the database would resolve it again).
        """
        p = self.principal
        return tuple(claimed_groups) == p.claimed_groups and tuple(claimed_roles) == p.claimed_roles


# ------------------------------------------------------------------------------ pools


@dataclass(frozen=True)
class SnapshotPool:
    """A pool as the snapshot keeps it: who may open it and what its sessions carry."""

    id: uuid.UUID
    name: str
    entitled_users: frozenset[str]
    entitled_groups: frozenset[str]
    #: The pool records its sessions: it is not brokered without the database.
    recorded: bool
    idle_timeout: float | None
    max_duration: float | None

    def may_open(self, principal: Principal) -> bool:
        """The judgement of :func:`deskpool.sessions.service.may_open`, on the snapshot."""
        if principal.disabled:
            return False
        if principal.may("pools:manage"):
            return True
        return principal.id in self.entitled_users or any(
            group in self.entitled_groups for group in principal.group_ids
        )

    def to_json(self) -> str:
        """The JSON text kept in Redis."""
        return json.dumps(
            {
                "id": str(self.id),
                "name": self.name,
                "entitled_users": sorted(self.entitled_users),
                "entitled_groups": sorted(self.entitled_groups),
                "recorded": self.recorded,
                "idle_timeout": self.idle_timeout,
                "max_duration": self.max_duration,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SnapshotPool:
        """Read what :meth:`to_json` wrote."""
        d = json.loads(text)
        return cls(
            id=uuid.UUID(d["id"]),
            name=str(d["name"]),
            entitled_users=frozenset(d["entitled_users"]),
            entitled_groups=frozenset(d["entitled_groups"]),
            recorded=bool(d["recorded"]),
            idle_timeout=d["idle_timeout"],
            max_duration=d["max_duration"],
        )


# ------------------------------------------------------------------------------ desktops


@dataclass(frozen=True)
class SnapshotDesktop:
    """A desktop that can be handed out or reconnected to, and its sealed target.

    :ivar sealed_target: the :class:`~deskpool.sessions.tunnel.DesktopTarget` JSON sealed by
        the secret store for :func:`target_context` (it may hold credentials), hex.
    """

    id: uuid.UUID
    pool_id: uuid.UUID
    name: str
    vm_id: str
    protocol: str
    sealed_target: str
    created_at: datetime

    def as_desktop(self, user_id: str) -> Desktop:
        """The desktop as the API shows it once handed to ``user_id``."""
        return Desktop(
            id=self.id,
            pool_id=self.pool_id,
            name=self.name,
            state=DesktopState.IN_USE,
            created_at=self.created_at,
            state_changed_at=datetime.now(UTC),
            vm_id=self.vm_id,
            assigned_user=user_id,
            in_session=False,
            used_since_refresh=True,
        )

    def to_json(self) -> str:
        """The JSON text kept in Redis."""
        return json.dumps(
            {
                "id": str(self.id),
                "pool_id": str(self.pool_id),
                "name": self.name,
                "vm_id": self.vm_id,
                "protocol": self.protocol,
                "sealed_target": self.sealed_target,
                "created_at": self.created_at.isoformat(),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SnapshotDesktop:
        """Read what :meth:`to_json` wrote."""
        d = json.loads(text)
        return cls(
            id=uuid.UUID(d["id"]),
            pool_id=uuid.UUID(d["pool_id"]),
            name=str(d["name"]),
            vm_id=str(d["vm_id"]),
            protocol=str(d["protocol"]),
            sealed_target=str(d["sealed_target"]),
            created_at=datetime.fromisoformat(d["created_at"]),
        )


#: The secret kind a snapshot's desktop target is sealed under.
TARGET_SECRET_KIND = "outage.desktop_target"


# ------------------------------------------------------------------------------ journal


class ActKind(StrEnum):
    """What an entry of the journal records."""

    #: A ready desktop handed to a user (a logon asked and allocated).
    ALLOCATE = "allocate"
    #: A user connecting again to a desktop he holds (a logon asked).
    RECONNECT = "reconnect"
    #: The logon's connection token was issued.
    TOKEN_ISSUED = "token_issued"
    #: A gateway redeemed the token: the session starts (its id chosen by the gateway).
    SESSION_START = "session_start"
    SESSION_CONNECTED = "session_connected"
    FIRST_FRAME = "first_frame"
    SESSION_END = "session_end"
    #: An audit event that could not be recorded (a refused call, say).
    AUDIT = "audit"


@dataclass(frozen=True)
class Act:
    """One entry of the journal: its stream id, its kind, its fields, and when it happened."""

    entry_id: str
    kind: ActKind
    at: datetime
    fields: Mapping[str, str]

    def id_of(self, name: str) -> uuid.UUID:
        """A field that holds an id."""
        return uuid.UUID(self.fields[name])

    def optional_id(self, name: str) -> uuid.UUID | None:
        """A field that may hold an id (empty: none)."""
        value = self.fields.get(name) or ""
        return uuid.UUID(value) if value else None

    @classmethod
    def of_entry(cls, entry_id: str | bytes, raw: Mapping[Any, Any]) -> Act:
        """An act from a stream entry (fields as Redis answers them, bytes or text)."""
        fields = {text_of(k): text_of(v) for k, v in raw.items()}
        return cls(
            entry_id=text_of(entry_id),
            kind=ActKind(fields.pop("kind")),
            at=datetime.fromisoformat(fields.pop("at")),
            fields=fields,
        )


def act_fields(kind: ActKind, at: datetime, **fields: object) -> dict[str, str]:
    """The fields of a stream entry recording ``kind`` at ``at`` (``None`` is written empty)."""
    return {
        "kind": str(kind),
        "at": at.isoformat(),
        **{name: "" if value is None else str(value) for name, value in fields.items()},
    }


def audit_fields(event: AuditEvent) -> dict[str, object]:
    """The fields of an :attr:`ActKind.AUDIT` act (its time is the act's)."""
    return {
        "action": event.action,
        "actor": event.actor,
        "resource_type": event.resource_type,
        "resource_id": event.resource_id,
        "outcome": event.outcome,
        "request_id": event.request_id,
        "source_address": event.source_address,
        "details": json.dumps(event.details),
    }


def audit_of(act: Act) -> AuditEvent:
    """The audit event an :attr:`ActKind.AUDIT` act carries."""
    f = act.fields
    return AuditEvent(
        action=f["action"],
        actor=f["actor"],
        resource_type=f["resource_type"],
        resource_id=f.get("resource_id") or None,
        outcome=outcome_of(f["outcome"]),
        occurred_at=act.at,
        request_id=f.get("request_id") or None,
        source_address=f.get("source_address") or None,
        details={**json.loads(f["details"]), "during_outage": True, "journal_entry": act.entry_id},
    )


def text_of(value: Any) -> str:
    """A value as Redis answers it (bytes or text), as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Status:
    """What the snapshot holds now, in brief (operators and tests read it)."""

    #: pool id -> how many of its desktops can be handed out.
    ready: Mapping[str, int]
    #: desktop id -> the user who holds it.
    holders: Mapping[str, str]
    #: The snapshot was refreshed after the last change that took access away.
    fresh: bool
    #: Acts journaled and not yet written to the database.
    pending: int
