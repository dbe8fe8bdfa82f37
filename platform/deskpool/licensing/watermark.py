"""The monotonic license watermark: the highest time seen, MAC-protected, never moving back.

The worker persists the watermark every ``LICENSE_WATERMARK_INTERVAL``; expiry is judged at the
later of the clock and the watermark (:func:`deskpool.licensing.model.judged_time`), so setting
the clock back does not extend a license. The stored row (one per deployment) holds the
instant, a sequence number that grows with every write, any *evidence* recorded against it, and
an HMAC-SHA256 over all of that and the instance id, under a key derived with HKDF from
``SECRETS_MASTER_KEY`` (``SECRETS_MASTER_KEY_PREVIOUS`` is accepted during a rotation; the next
write seals under the current key).

:func:`inspect` says what a stored row is worth: a MAC that does not verify is *tampered*; a row
whose sequence or instant is lower than what this process saw before is *backwards*. Both are
recorded as evidence by the next write (:func:`advance`), so fixing the row does not clear
them; installing a license issued after the evidence does. Without ``SECRETS_MASTER_KEY`` the
MAC is made under a key anyone can derive: the watermark still never moves back, but it is
reported as *unprotected*. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, replace
from datetime import datetime

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from deskpool.licensing.model import WatermarkIntegrity, WatermarkView, format_instant

_HKDF_INFO = b"deskpool license watermark v1"
_NO_MASTER_KEY = b"deskpool: no SECRETS_MASTER_KEY"


@dataclass(frozen=True)
class WatermarkKeys:
    """The MAC keys: derived from the master key, and from the retiring one during a rotation."""

    current: bytes
    previous: bytes | None
    protected: bool

    @classmethod
    def derive(cls, master_key: bytes | None, previous: bytes | None = None) -> WatermarkKeys:
        """HKDF-SHA256 of ``SECRETS_MASTER_KEY`` (or of a public constant when it is unset)."""
        return cls(
            current=_hkdf(master_key or _NO_MASTER_KEY),
            previous=_hkdf(previous) if previous else None,
            protected=bool(master_key),
        )


def _hkdf(material: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(material)


@dataclass(frozen=True)
class StoredWatermark:
    """The stored row.

    :ivar seq: grows by one with every write (0: never written).
    :ivar evidence: ``tampered`` or ``backwards`` once detected, until cleared.
    """

    instant: datetime | None
    seq: int
    evidence: str | None = None
    evidence_detail: str | None = None
    evidence_at: datetime | None = None
    mac: bytes | None = None

    @property
    def unset(self) -> bool:
        """Whether the row was never written (as the migration made it)."""
        return self.seq == 0 and self.instant is None and self.mac is None


@dataclass(frozen=True)
class Seen:
    """The highest watermark one process has read or written."""

    seq: int
    instant: datetime


def _message(instance_id: str, row: StoredWatermark) -> bytes:
    parts = [
        "deskpool-watermark/1",
        instance_id,
        str(row.seq),
        format_instant(row.instant) if row.instant else "",
        row.evidence or "",
        row.evidence_detail or "",
        format_instant(row.evidence_at) if row.evidence_at else "",
    ]
    return "\x1f".join(parts).encode()


def mac_of(key: bytes, instance_id: str, row: StoredWatermark) -> bytes:
    """The HMAC-SHA256 of ``row`` (its ``mac`` aside) under ``key``."""
    return hmac.new(key, _message(instance_id, row), hashlib.sha256).digest()


def _verifies(keys: WatermarkKeys, instance_id: str, row: StoredWatermark) -> bool:
    if row.mac is None:
        return False
    for key in (keys.current, keys.previous):
        if key is not None and hmac.compare_digest(mac_of(key, instance_id, row), row.mac):
            return True
    return False


def inspect(
    row: StoredWatermark | None, keys: WatermarkKeys, instance_id: str, seen: Seen | None = None
) -> WatermarkView:
    """What the stored row is worth (``None``: the row was deleted)."""
    if row is None:
        return WatermarkView(None, WatermarkIntegrity.TAMPERED, "its row was deleted")
    if row.unset:
        if seen is not None:
            return WatermarkView(
                None,
                WatermarkIntegrity.BACKWARDS,
                f"it was reset after reaching {format_instant(seen.instant)}",
            )
        return WatermarkView(None, WatermarkIntegrity.UNSET)
    if not _verifies(keys, instance_id, row):
        return WatermarkView(row.instant, WatermarkIntegrity.TAMPERED, "its MAC does not verify")
    if row.evidence is not None:
        return WatermarkView(
            row.instant, WatermarkIntegrity(row.evidence), row.evidence_detail or ""
        )
    if seen is not None and (
        row.seq < seen.seq or (row.instant is not None and row.instant < seen.instant)
    ):
        return WatermarkView(
            row.instant,
            WatermarkIntegrity.BACKWARDS,
            f"it moved back from {format_instant(seen.instant)} (write {seen.seq}) to "
            f"{format_instant(row.instant) if row.instant else 'nothing'} (write {row.seq})",
        )
    integrity = WatermarkIntegrity.INTACT if keys.protected else WatermarkIntegrity.UNPROTECTED
    return WatermarkView(row.instant, integrity)


def advance(
    row: StoredWatermark | None,
    now: datetime,
    keys: WatermarkKeys,
    instance_id: str,
    seen: Seen | None = None,
) -> tuple[StoredWatermark, WatermarkView]:
    """The next row to write at ``now``, and what the current one was worth.

    The instant only grows: it is the highest of the stored instant (even a tampered one: a
    forward edit only shortens the license), what this process saw, and ``now``. New evidence
    is recorded; recorded evidence is kept.
    """
    view = inspect(row, keys, instance_id, seen)
    highest = max(
        [moment for moment in (now, view.instant, seen.instant if seen else None) if moment],
    )
    seq = max(row.seq if row is not None else 0, seen.seq if seen else 0) + 1
    evidence, detail, at = None, None, None
    if row is not None and row.evidence is not None and _verifies(keys, instance_id, row):
        evidence, detail, at = row.evidence, row.evidence_detail, row.evidence_at
    elif view.evidence:
        evidence, detail, at = view.integrity.value, view.detail, now
    following = StoredWatermark(highest, seq, evidence, detail, at)
    return replace(following, mac=mac_of(keys.current, instance_id, following)), view


def cleared(
    row: StoredWatermark, now: datetime, keys: WatermarkKeys, instance_id: str
) -> StoredWatermark:
    """``row`` without its evidence, sealed afresh (a license issued after it was installed)."""
    instant = max(moment for moment in (row.instant, now) if moment is not None)
    following = StoredWatermark(instant, row.seq + 1)
    return replace(following, mac=mac_of(keys.current, instance_id, following))
