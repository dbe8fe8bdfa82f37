"""The licensing domain, with no I/O: editions, a license, its judgement, and enforcement.

*Editions and limits* are declared once, in :data:`EDITION_LIMITS`; everything else (the free
edition's enforcement, a license that omits a limit, the operator guide) reads them from there.

*A license* (:class:`License`) is what a license document says once verified: the document, its
signing and its verification are :mod:`deskpool.licensing.document`.

*Judgement* (:func:`judge`): a license is judged at the later of the clock and the persisted
watermark less :data:`CLOCK_SKEW_TOLERANCE`, so setting the clock back never extends it. After
``expires_at`` it is in grace for :data:`GRACE_PERIOD`, then expired, and the free edition's
limits apply. A watermark that was tampered with or moved backwards counts as evidence that the
license expired. A build whose manifest shows modified files, or is invalid, runs with the free
edition's limits.

*Enforcement* (:func:`check_growth`, :func:`headroom`) only ever decides whether something may
be *added*; nothing here deletes, powers off or disconnects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from deskpool.errors import Conflict

#: How long an expired license keeps its limits before the free edition's apply.
GRACE_PERIOD = timedelta(days=14)
#: How far behind the watermark a clock may be before expiry is judged by the watermark alone
#: (and the difference is reported): covers clocks of several hosts that disagree a little.
CLOCK_SKEW_TOLERANCE = timedelta(minutes=15)


class Edition(StrEnum):
    """The editions deskpool is sold in."""

    FREE = "free"
    STANDARD = "standard"
    ENTERPRISE = "enterprise"


class Resource(StrEnum):
    """What a limit counts."""

    #: Desktops (virtual machines) recorded, in every pool and state.
    DESKTOPS = "desktops"
    #: Desktop pools.
    POOLS = "pools"
    #: Remote desktop sessions open at the same time.
    SESSIONS = "sessions"


@dataclass(frozen=True)
class Limits:
    """How many of each resource an edition allows; ``None`` is no limit."""

    desktops: int | None
    pools: int | None
    sessions: int | None

    def of(self, resource: Resource) -> int | None:
        """The limit of ``resource``."""
        value: int | None = getattr(self, resource.value)
        return value

    def as_dict(self) -> dict[str, int | None]:
        """``{"desktops": ..., "pools": ..., "sessions": ...}``."""
        return {resource.value: self.of(resource) for resource in Resource}


#: THE limits of every edition: the one place they are declared. A license may state its own
#: limits; those it omits are its edition's. The free edition (no license) leaves the quick
#: start's demo pool and a small real deployment fully usable.
EDITION_LIMITS: Mapping[Edition, Limits] = {
    Edition.FREE: Limits(desktops=50, pools=10, sessions=50),
    Edition.STANDARD: Limits(desktops=1000, pools=100, sessions=1000),
    Edition.ENTERPRISE: Limits(desktops=None, pools=None, sessions=None),
}

FREE_LIMITS = EDITION_LIMITS[Edition.FREE]


class LicenseLimitReached(Conflict):
    """Adding one more would go beyond the limit in force; nothing existing is touched."""

    code = "license_limit_reached"
    title = "License limit reached"


# --------------------------------------------------------------------------- the license


@dataclass(frozen=True)
class License:
    """A verified license."""

    id: str
    product: str
    licensee: str
    edition: Edition
    limits: Limits
    issued_at: datetime
    expires_at: datetime
    key_id: str = ""

    def claims(self) -> dict[str, Any]:
        """The license object as signed."""
        return {
            "id": self.id,
            "product": self.product,
            "licensee": self.licensee,
            "edition": self.edition.value,
            "limits": self.limits.as_dict(),
            "issued_at": format_instant(self.issued_at),
            "expires_at": format_instant(self.expires_at),
        }


def format_instant(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` (``2026-11-01T00:00:00Z``)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- judgement


class LicenseStatus(StrEnum):
    """Where the installed license stands."""

    #: No license is installed: the free edition.
    FREE = "free"
    #: A license is installed and in force.
    VALID = "valid"
    #: The license expired less than :data:`GRACE_PERIOD` ago; its limits still apply.
    GRACE = "grace"
    #: The license expired (or the watermark shows evidence of it): the free edition's limits.
    EXPIRED = "expired"
    #: The installed document no longer verifies (edited in the database, a retired key).
    INVALID = "invalid"


class WatermarkIntegrity(StrEnum):
    """What the stored watermark's MAC and history say."""

    #: Never persisted yet.
    UNSET = "unset"
    #: Its MAC verifies under a key derived from ``SECRETS_MASTER_KEY``.
    INTACT = "intact"
    #: Its MAC verifies, but no ``SECRETS_MASTER_KEY`` is set, so anyone could have made it.
    UNPROTECTED = "unprotected"
    #: Its MAC does not verify, or evidence of that is recorded.
    TAMPERED = "tampered"
    #: It moved backwards, or evidence of that is recorded.
    BACKWARDS = "backwards"


class BuildIntegrity(StrEnum):
    """What the signed build manifest says about the installed files."""

    VERIFIED = "verified"
    MODIFIED = "modified"
    UNSIGNED = "unsigned"
    INVALID = "invalid"


@dataclass(frozen=True)
class WatermarkView:
    """The watermark as judgement sees it."""

    instant: datetime | None
    integrity: WatermarkIntegrity
    detail: str = ""

    @property
    def trusted(self) -> bool:
        """Whether it may be used as a lower bound of the time."""
        return self.instant is not None and self.integrity in {
            WatermarkIntegrity.INTACT,
            WatermarkIntegrity.UNPROTECTED,
        }

    @property
    def evidence(self) -> bool:
        """Whether it is evidence that the license expired (tampered, moved backwards)."""
        return self.integrity in {WatermarkIntegrity.TAMPERED, WatermarkIntegrity.BACKWARDS}


@dataclass(frozen=True)
class Judgement:
    """The license state that enforcement follows.

    :ivar edition: the edition whose limits are in force (``free`` once fallen back).
    :ivar limits: the limits in force.
    :ivar judged_at: the time expiry was judged at (see :func:`judged_time`).
    :ivar reasons: one sentence per thing an operator should know.
    """

    status: LicenseStatus
    edition: Edition
    limits: Limits
    license: License | None
    judged_at: datetime
    grace_ends_at: datetime | None = None
    reasons: tuple[str, ...] = field(default=())

    @property
    def licensed(self) -> bool:
        """Whether a license's limits are in force (the edition is not the free one)."""
        return self.edition is not Edition.FREE


@dataclass(frozen=True)
class ClockReading:
    """This process's clock against the database server's and the watermark, read together."""

    process: datetime
    database: datetime
    watermark: datetime | None = None

    @property
    def from_database(self) -> timedelta:
        """How far this process's clock is ahead of the database server's (negative: behind)."""
        return self.process - self.database

    @property
    def from_watermark(self) -> timedelta | None:
        """How far this process's clock is ahead of the watermark (negative: behind)."""
        return self.process - self.watermark if self.watermark is not None else None

    @property
    def skewed(self) -> bool:
        """Whether it differs from the database server's by more than the tolerance."""
        return abs(self.from_database) > CLOCK_SKEW_TOLERANCE

    def reason(self) -> str | None:
        """One sentence when the clock is skewed; ``None`` otherwise."""
        if not self.skewed:
            return None
        way = "ahead of" if self.from_database > timedelta(0) else "behind"
        return (
            f"This process's clock is {_span(abs(self.from_database))} {way} the database "
            f"server's (tolerance {_span(CLOCK_SKEW_TOLERANCE)}): fix its time synchronisation. "
            "Expiry is judged by the later of this clock and the watermark."
        )

    def as_details(self) -> dict[str, Any]:
        """The reading for ``/readyz`` and the license state (offsets in seconds)."""
        from_watermark = self.from_watermark
        return {
            "process_time": format_instant(self.process),
            "database_time": format_instant(self.database),
            "offset_from_database_seconds": round(self.from_database.total_seconds(), 3),
            "offset_from_watermark_seconds": (
                round(from_watermark.total_seconds(), 3) if from_watermark is not None else None
            ),
            "within_tolerance": not self.skewed,
        }


def judged_time(now: datetime, watermark: WatermarkView) -> datetime:
    """The later of the clock and the trusted watermark less :data:`CLOCK_SKEW_TOLERANCE`."""
    if watermark.trusted and watermark.instant is not None:
        return max(now, watermark.instant - CLOCK_SKEW_TOLERANCE)
    return now


def judge(
    license: License | None,
    *,
    now: datetime,
    watermark: WatermarkView,
    build: BuildIntegrity,
    invalid_reason: str | None = None,
    clock: ClockReading | None = None,
) -> Judgement:
    """Judge the installed license (``None``: none, or ``invalid_reason`` says why not).

    :param clock: this process's clock against the database's, to report a skew.
    """
    at = judged_time(now, watermark)
    reasons: list[str] = []
    skew = clock.reason() if clock is not None else None
    if skew is not None:
        reasons.append(skew)
    if watermark.instant is not None and now < watermark.instant - CLOCK_SKEW_TOLERANCE:
        reasons.append(
            f"The clock is {_span(watermark.instant - now)} behind the license watermark; "
            "expiry is judged by the watermark."
        )
    if watermark.integrity is WatermarkIntegrity.UNPROTECTED:
        reasons.append(
            "SECRETS_MASTER_KEY is not set: the license watermark is not protected against editing."
        )
    if license is None:
        if invalid_reason is not None:
            reasons.insert(0, f"The installed license is not valid: {invalid_reason}")
            return Judgement(
                LicenseStatus.INVALID, Edition.FREE, FREE_LIMITS, None, at, None, tuple(reasons)
            )
        return Judgement(
            LicenseStatus.FREE, Edition.FREE, FREE_LIMITS, None, at, None, tuple(reasons)
        )
    grace_ends = license.expires_at + GRACE_PERIOD
    if watermark.evidence:
        reasons.insert(
            0,
            f"The license watermark was {watermark.integrity.value} ({watermark.detail}); this "
            "counts as evidence that the license expired. Install a license issued after it.",
        )
        status = LicenseStatus.EXPIRED
    elif at < license.expires_at:
        status = LicenseStatus.VALID
    elif at < grace_ends:
        status = LicenseStatus.GRACE
        reasons.insert(
            0,
            f"License {license.id} expired at {format_instant(license.expires_at)}; its limits "
            f"apply until the grace period ends at {format_instant(grace_ends)}.",
        )
    else:
        status = LicenseStatus.EXPIRED
        reasons.insert(
            0,
            f"License {license.id} expired at {format_instant(license.expires_at)} and its grace "
            "period has ended: the free edition's limits apply.",
        )
    edition, limits = license.edition, license.limits
    if status is LicenseStatus.EXPIRED:
        edition, limits = Edition.FREE, FREE_LIMITS
    elif build in {BuildIntegrity.MODIFIED, BuildIntegrity.INVALID}:
        edition, limits = Edition.FREE, FREE_LIMITS
        reasons.append(
            f"The build manifest is {build.value}: the free edition's limits apply until the "
            "installation is restored."
        )
    return Judgement(status, edition, limits, license, at, grace_ends, tuple(reasons))


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


# --------------------------------------------------------------------------- enforcement


@dataclass(frozen=True)
class Usage:
    """How much of each limited resource exists now (of those counted)."""

    desktops: int = 0
    pools: int = 0
    sessions: int = 0
    #: The resources counted: a session check counts the sessions alone (see
    #: :meth:`of_sessions`); the others' figures are then not known, and not read.
    counted: frozenset[Resource] = frozenset(Resource)

    @classmethod
    def of_sessions(cls, sessions: int) -> Usage:
        """The usage a session check counts: the desktops with a session, nothing else.

        Counting the desktops too made every opening read every desktop of the installation
        (issue 39), for nothing the check needs.
        """
        return cls(sessions=sessions, counted=frozenset({Resource.SESSIONS}))

    def of(self, resource: Resource) -> int:
        """The count of ``resource``.

        :raises ValueError: ``resource`` was not counted.
        """
        if resource not in self.counted:
            raise ValueError(f"the {resource.value} were not counted")
        value: int = getattr(self, resource.value)
        return value

    def as_dict(self) -> dict[str, int]:
        """``{"desktops": ..., "pools": ..., "sessions": ...}``, of the resources counted."""
        return {
            resource.value: self.of(resource) for resource in Resource if resource in self.counted
        }


def headroom(judgement: Judgement, usage: Usage, resource: Resource) -> int | None:
    """How many more of ``resource`` may be added; ``None`` when unlimited."""
    limit = judgement.limits.of(resource)
    if limit is None:
        return None
    return max(0, limit - usage.of(resource))


def room_for_concurrent(
    judgement: Judgement, usage: Usage, resource: Resource, concurrent: int
) -> bool:
    """Whether one more of ``resource`` is allowed even if ``concurrent`` adders count at once.

    ``usage`` was counted while up to ``concurrent - 1`` other transactions, not yet committed
    and invisible to the count, may each be adding one too: if the limit leaves room for all of
    them, none can take more than the limit, and no serialization is needed.
    """
    room = headroom(judgement, usage, resource)
    return room is None or room >= max(concurrent, 1)


def limit_reason(judgement: Judgement, usage: Usage, resource: Resource) -> str:
    """Why no more of ``resource`` may be added (for problems, pool health and the audit)."""
    limit = judgement.limits.of(resource)
    if judgement.licensed:
        who, why = f"License {_id(judgement)}", ""
    else:
        who, why = "The free edition", ""
        if judgement.status is not LicenseStatus.FREE:
            why = f" (the license is {judgement.status.value} or the build is not intact)"
    return (
        f"{who} allows {limit} {resource.value}{why} and {usage.of(resource)} exist: no more "
        "are added; nothing existing is changed."
    )


def _id(judgement: Judgement) -> str:
    return judgement.license.id if judgement.license is not None else "?"


def check_growth(judgement: Judgement, usage: Usage, resource: Resource, adding: int = 1) -> None:
    """Allow adding ``adding`` of ``resource``, or raise :class:`LicenseLimitReached`."""
    room = headroom(judgement, usage, resource)
    if room is not None and adding > room:
        raise LicenseLimitReached(
            limit_reason(judgement, usage, resource),
            extra={
                "resource": resource.value,
                "limit": judgement.limits.of(resource),
                "in_use": usage.of(resource),
                "edition": judgement.edition.value,
            },
        )
