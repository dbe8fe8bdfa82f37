"""The licensing domain, with no I/O: editions, licenses, their judgement, and enforcement.

*Editions and limits* are declared once, in :data:`EDITION_LIMITS`; everything else (the free
edition's enforcement, a license that omits a limit, the operator guide) reads them from there.

*A license* is a JSON document signed by the vendor with Ed25519::

    {"format": "deskpool-license/1",
     "license": {"id": ..., "product": "deskpool", "licensee": ..., "edition": ...,
                 "limits": {"desktops": 500, "pools": 50, "sessions": 500},
                 "issued_at": "2026-11-01T00:00:00Z", "expires_at": "2027-11-01T00:00:00Z"},
     "sha256": "<hex digest of the canonical license object>",
     "key_id": "<fingerprint of the vendor key>",
     "signature": "<base64 Ed25519 signature of the canonical license object>"}

The canonical form is the license object as compact JSON with sorted keys, prefixed with
:data:`SIGNING_LABEL`. :func:`verify_document` refuses, each with its own problem code: a
document that cannot be read (``license_malformed``), one whose fields were changed after
signing (``license_modified``: the digest no longer matches; the digest is a diagnosis, the
signature is the protection), one for another product (``license_other_product``), and one whose
signature is not by a vendor key of this build (``license_forged``). :func:`check_installable`
adds ``license_expired``.

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

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deskpool.errors import Conflict, DeskpoolError
from deskpool.values import instant_problem

#: The product a license must name.
PRODUCT = "deskpool"
#: The document format this version reads and writes.
LICENSE_FORMAT = "deskpool-license/1"
#: Prefixed to the canonical license object before signing (domain separation).
SIGNING_LABEL = b"deskpool-license/1\n"

#: How long an expired license keeps its limits before the free edition's apply.
GRACE_PERIOD = timedelta(days=14)
#: How far behind the watermark a clock may be before expiry is judged by the watermark alone
#: (and the difference is reported): covers clocks of several hosts that disagree a little.
CLOCK_SKEW_TOLERANCE = timedelta(minutes=15)
#: The largest license document accepted, in bytes.
MAX_DOCUMENT_BYTES = 16 * 1024


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


# --------------------------------------------------------------------------- refusals


class LicenseRefused(DeskpoolError):
    """A license document that cannot be installed (each cause has its own code)."""

    status = 422
    code = "license_refused"
    title = "License refused"


class LicenseMalformed(LicenseRefused):
    """The document is not a deskpool license document."""

    code = "license_malformed"
    title = "The license document cannot be read"


class LicenseModified(LicenseRefused):
    """A field was changed after the license was signed."""

    code = "license_modified"
    title = "The license was modified after it was signed"


class LicenseForged(LicenseRefused):
    """The signature is not by a vendor key of this build."""

    code = "license_forged"
    title = "The license signature is not the vendor's"


class LicenseOtherProduct(LicenseRefused):
    """The license is for another product."""

    code = "license_other_product"
    title = "The license is for another product"


class LicenseExpired(LicenseRefused):
    """The license has expired."""

    code = "license_expired"
    title = "The license has expired"


class LicenseLimitReached(Conflict):
    """Adding one more would go beyond the limit in force; nothing existing is touched."""

    code = "license_limit_reached"
    title = "License limit reached"


# --------------------------------------------------------------------------- the document


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


def parse_instant(text: Any, name: str) -> datetime:
    """Read an RFC 3339 date-time with an offset in the years 1970 to 8999 (:mod:`deskpool.values`).

    :raises LicenseMalformed: anything else.
    """
    if not isinstance(text, str):
        raise LicenseMalformed(f"`{name}` must be an RFC 3339 date-time.")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise LicenseMalformed(f"`{name}` is not an RFC 3339 date-time: {text[:40]!r}.") from None
    if moment.tzinfo is None:
        raise LicenseMalformed(f"`{name}` must carry a UTC offset (`Z`).")
    problem = instant_problem(moment)  # judging adds the grace period to it
    if problem is not None:
        raise LicenseMalformed(f"`{name}`: {problem}")
    return moment.astimezone(UTC)


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys: the bytes that are digested and signed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def key_fingerprint(public_key: Ed25519PublicKey) -> str:
    """The id of a vendor key: the first 16 hex digits of the SHA-256 of its raw bytes."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign_document(private_key: Ed25519PrivateKey, claims: Mapping[str, Any]) -> str:
    """Sign a license object (the vendor's side; tests use a test key)."""
    body = canonical(dict(claims))
    document = {
        "format": LICENSE_FORMAT,
        "license": dict(claims),
        "sha256": hashlib.sha256(body).hexdigest(),
        "key_id": key_fingerprint(private_key.public_key()),
        "signature": base64.b64encode(private_key.sign(SIGNING_LABEL + body)).decode("ascii"),
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def _limits_of(raw: Any, edition: Edition) -> Limits:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or set(raw) - {r.value for r in Resource}:
        raise LicenseMalformed("`limits` must be an object of desktops, pools and sessions.")
    defaults = EDITION_LIMITS[edition]
    values: dict[str, int | None] = {}
    for resource in Resource:
        value = raw.get(resource.value, defaults.of(resource))
        if value is not None and (type(value) is not int or value < 0):
            raise LicenseMalformed(f"`limits.{resource.value}` must be a whole number or null.")
        values[resource.value] = value
    return Limits(**values)


def _claims_of(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("format") != LICENSE_FORMAT:
        raise LicenseMalformed(f"This is not a `{LICENSE_FORMAT}` document.")
    claims = document.get("license")
    if not isinstance(claims, dict):
        raise LicenseMalformed("The document has no `license` object.")
    for name in ("sha256", "key_id", "signature"):
        if not isinstance(document.get(name), str):
            raise LicenseMalformed(f"The document has no `{name}`.")
    return claims


def _license_of(claims: Mapping[str, Any], key_id: str) -> License:
    for name in ("id", "product", "licensee", "edition"):
        if not isinstance(claims.get(name), str) or not claims[name].strip():
            raise LicenseMalformed(f"`license.{name}` must be a non-empty string.")
    try:
        edition = Edition(claims["edition"])
    except ValueError:
        known = ", ".join(e.value for e in Edition if e is not Edition.FREE)
        raise LicenseMalformed(f"Unknown edition {claims['edition']!r}; known: {known}.") from None
    if edition is Edition.FREE:
        raise LicenseMalformed("The free edition needs no license.")
    issued = parse_instant(claims.get("issued_at"), "issued_at")
    expires = parse_instant(claims.get("expires_at"), "expires_at")
    if expires <= issued:
        raise LicenseMalformed("`expires_at` must be after `issued_at`.")
    return License(
        id=claims["id"],
        product=claims["product"],
        licensee=claims["licensee"],
        edition=edition,
        limits=_limits_of(claims.get("limits"), edition),
        issued_at=issued,
        expires_at=expires,
        key_id=key_id,
    )


def verify_document(text: str, trusted: Mapping[str, Ed25519PublicKey]) -> License:
    """Read and verify a license document against the vendor keys ``trusted`` (by key id).

    :raises LicenseMalformed: not a license document.
    :raises LicenseModified: a field was changed after signing.
    :raises LicenseOtherProduct: the license names another product.
    :raises LicenseForged: the signature is not by one of ``trusted``.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise LicenseMalformed(f"A license document is at most {MAX_DOCUMENT_BYTES} bytes.")
    try:
        document = json.loads(text)
    except ValueError:
        raise LicenseMalformed("The license document is not JSON.") from None
    claims = _claims_of(document)
    try:
        body = canonical(claims)
        canonical(document)
    except UnicodeEncodeError:
        # JSON may escape half of a UTF-16 pair (``\ud800``); no text of a license holds one.
        raise LicenseMalformed(
            "The license document holds text that is not valid Unicode (a lone surrogate)."
        ) from None
    if hashlib.sha256(body).hexdigest() != document["sha256"]:
        raise LicenseModified(
            "A field of the license was changed after it was signed; install the document "
            "exactly as the vendor sent it."
        )
    if claims.get("product") != PRODUCT:
        raise LicenseOtherProduct(
            f"This license is for {str(claims.get('product'))[:60]!r}, not {PRODUCT!r}."
        )
    key = trusted.get(document["key_id"])
    try:
        signature = base64.b64decode(document["signature"], validate=True)
        if key is None:
            raise InvalidSignature
        key.verify(signature, SIGNING_LABEL + body)
    except (InvalidSignature, binascii.Error, ValueError):
        raise LicenseForged(
            "The license is not signed by a vendor key of this build of deskpool."
        ) from None
    return _license_of(claims, document["key_id"])


def check_installable(license: License, judged_at: datetime) -> None:
    """Refuse a license that has already expired at ``judged_at`` (see :func:`judged_time`)."""
    if judged_at >= license.expires_at:
        raise LicenseExpired(
            f"License {license.id} expired at {format_instant(license.expires_at)}."
        )


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
    """How much of each limited resource exists now."""

    desktops: int = 0
    pools: int = 0
    sessions: int = 0

    def of(self, resource: Resource) -> int:
        """The count of ``resource``."""
        value: int = getattr(self, resource.value)
        return value

    def as_dict(self) -> dict[str, int]:
        """``{"desktops": ..., "pools": ..., "sessions": ...}``."""
        return {resource.value: self.of(resource) for resource in Resource}


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
