"""The license document, with no I/O: its format, how the vendor signs it and how it is verified.

A license is a JSON document signed by the vendor with Ed25519::

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
adds ``license_expired``. What a verified license is, and what is judged and enforced of it, is
:mod:`deskpool.licensing.model`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deskpool.errors import DeskpoolError
from deskpool.licensing.model import (
    EDITION_LIMITS,
    Edition,
    License,
    Limits,
    Resource,
    format_instant,
)
from deskpool.values import instant_problem

#: The product a license must name.
PRODUCT = "deskpool"
#: The document format this version reads and writes.
LICENSE_FORMAT = "deskpool-license/1"
#: Prefixed to the canonical license object before signing (domain separation).
SIGNING_LABEL = b"deskpool-license/1\n"
#: The largest license document accepted, in bytes.
MAX_DOCUMENT_BYTES = 16 * 1024


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
